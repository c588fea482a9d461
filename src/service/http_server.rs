//! The appliance's HTTP server: hyper (HTTP/1.1) serving an axum router on
//! a tokio runtime of its own thread, with every resource a client can take
//! bounded. One request per connection (the answer closes it); at most
//! `max_connections` at once (more are closed at once); a request head of at
//! most `max_request_bytes` (431 past it); a client that has not sent its
//! head within `timeout` is cut off (closed), and no connection lives longer
//! than [`CONNECTION_LIFETIME_FACTOR`] timeouts; past `requests_per_sec`
//! (a token bucket over every client) a request is answered 429 without
//! touching the router. Its threads run at the lowest priority
//! ([`SERVER_NICE`]), below every thread of the pipeline.

use super::ServiceError;
use axum::Router;
use axum::body::Body;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What the server lets clients take.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HttpLimits {
    /// Connections served at once; more are closed as soon as accepted.
    pub max_connections: usize,
    /// How long a client may take to send its request head.
    pub timeout: Duration,
    /// Requests answered per second, over every client (with a burst of one
    /// second's worth); past it the answer is 429 Too Many Requests.
    pub requests_per_sec: u32,
    /// Largest request head (request line and headers), bytes (at least 8192).
    pub max_request_bytes: usize,
}

/// Largest request head accepted by default, in bytes (hyper's smallest buffer).
pub const MAX_REQUEST_BYTES: usize = 8192;
/// How long a client may take to send its request by default.
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(2);
/// A connection is closed this many timeouts after it was accepted, whatever
/// it is doing (a client reading an answer very slowly).
pub const CONNECTION_LIFETIME_FACTOR: u32 = 5;
/// The nice value of the server's threads (the lowest): however many
/// clients it serves, the pipeline's threads (nice 0 to 10) take the CPU
/// from it whenever they need it.
pub const SERVER_NICE: i32 = 19;

/// Lowers the calling server thread's priority to [`SERVER_NICE`].
fn lower_priority() {
    if let Err(e) = crate::realtime::set_current_thread_nice(SERVER_NICE) {
        tracing::warn!(error = %e, "HTTP server: cannot lower its thread's priority; it competes with the pipeline");
    }
}

impl Default for HttpLimits {
    fn default() -> Self {
        Self {
            max_connections: 64,
            timeout: CLIENT_TIMEOUT,
            requests_per_sec: 500,
            max_request_bytes: MAX_REQUEST_BYTES,
        }
    }
}

/// Counters of what the server refused, for tests and logs.
#[derive(Debug, Default)]
pub struct HttpCounters {
    /// Connections accepted and served.
    pub served: AtomicU64,
    /// Connections closed at once: `max_connections` were being served.
    pub refused_connections: AtomicU64,
    /// Requests answered 429 (over `requests_per_sec`).
    pub rate_limited: AtomicU64,
    /// Connections cut off at the lifetime bound.
    pub cut_off: AtomicU64,
}

/// A token bucket: `rate` tokens a second, at most `rate` stored.
#[derive(Debug)]
struct TokenBucket {
    rate: f64,
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    fn new(rate: u32) -> Self {
        Self { rate: f64::from(rate.max(1)), tokens: f64::from(rate.max(1)), last: Instant::now() }
    }

    fn take(&mut self, now: Instant) -> bool {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = now;
        self.tokens = (self.tokens + elapsed * self.rate).min(self.rate);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// The running server. Dropping it (or [`HttpServer::stop`]) closes the
/// listener, ends the connections and joins its thread.
pub struct HttpServer {
    addr: SocketAddr,
    stop: Option<tokio::sync::watch::Sender<bool>>,
    thread: Option<JoinHandle<()>>,
    counters: Arc<HttpCounters>,
}

impl HttpServer {
    /// Binds `addr` (port 0 picks a free port) and serves `router` from a
    /// thread named `frameloop-<name>`. Binding errors are returned so
    /// start-up can fail clearly.
    pub fn start(
        addr: SocketAddr,
        router: Router,
        limits: HttpLimits,
        name: &str,
    ) -> Result<Self, ServiceError> {
        let bind_error = |source| ServiceError::MetricsBind { addr, source };
        let listener = std::net::TcpListener::bind(addr).map_err(bind_error)?;
        let local = listener.local_addr().map_err(bind_error)?;
        listener.set_nonblocking(true).map_err(bind_error)?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .max_blocking_threads(2)
            .thread_name(format!("frameloop-{name}-render"))
            .on_thread_start(lower_priority)
            .build()
            .map_err(|source| ServiceError::Spawn { thread: "http", source })?;
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let counters = Arc::new(HttpCounters::default());
        let thread_counters = Arc::clone(&counters);
        let thread = std::thread::Builder::new()
            .name(format!("frameloop-{name}"))
            .spawn(move || {
                lower_priority();
                runtime.block_on(async move {
                    match tokio::net::TcpListener::from_std(listener) {
                        Ok(listener) => accept_loop(listener, router, limits, stop_rx, thread_counters).await,
                        Err(e) => {
                            tracing::error!(error = %e, "HTTP server: cannot register the listener; stopped")
                        }
                    }
                });
                runtime.shutdown_timeout(Duration::from_millis(200));
            })
            .map_err(|source| ServiceError::Spawn { thread: "http", source })?;
        Ok(Self { addr: local, stop: Some(stop_tx), thread: Some(thread), counters })
    }

    /// The address actually bound.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// What the server refused so far.
    pub fn counters(&self) -> &HttpCounters {
        &self.counters
    }

    /// Stops accepting, ends the connections and joins the thread.
    pub fn stop(mut self) {
        self.shut_down();
    }

    fn shut_down(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(true);
        }
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            tracing::error!("the HTTP server thread panicked");
        }
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        self.shut_down();
    }
}

fn too_many_requests() -> Response<Body> {
    let mut answer = Response::new(Body::from("too many requests; retry in a second\n"));
    *answer.status_mut() = StatusCode::TOO_MANY_REQUESTS;
    answer.headers_mut().insert(hyper::header::RETRY_AFTER, hyper::header::HeaderValue::from_static("1"));
    answer.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    answer
}

async fn accept_loop(
    listener: tokio::net::TcpListener,
    router: Router,
    limits: HttpLimits,
    mut stop: tokio::sync::watch::Receiver<bool>,
    counters: Arc<HttpCounters>,
) {
    let permits = Arc::new(tokio::sync::Semaphore::new(limits.max_connections.max(1)));
    let bucket = Arc::new(Mutex::new(TokenBucket::new(limits.requests_per_sec)));
    let lifetime = limits.timeout * CONNECTION_LIFETIME_FACTOR;
    let mut connections = tokio::task::JoinSet::new();
    let mut error_logged = false;
    loop {
        let accepted = tokio::select! {
            _ = stop.changed() => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
            accepted = listener.accept() => accepted,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => {
                if !error_logged {
                    tracing::warn!(error = %e, "HTTP server: accept failed (further failures not logged)");
                    error_logged = true;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let Ok(permit) = Arc::clone(&permits).try_acquire_owned() else {
            counters.refused_connections.fetch_add(1, Ordering::Relaxed);
            drop(stream);
            continue;
        };
        counters.served.fetch_add(1, Ordering::Relaxed);
        let _ = stream.set_nodelay(true);
        let (router, bucket, limited) = (router.clone(), Arc::clone(&bucket), Arc::clone(&counters));
        let service = tower::service_fn(move |request: Request<hyper::body::Incoming>| {
            let allowed = bucket.lock().unwrap_or_else(|p| p.into_inner()).take(Instant::now());
            let router = router.clone();
            let counters = Arc::clone(&limited);
            async move {
                if !allowed {
                    counters.rate_limited.fetch_add(1, Ordering::Relaxed);
                    return Ok::<_, std::convert::Infallible>(too_many_requests());
                }
                let request = request.map(Body::new);
                tower::ServiceExt::oneshot(router, request).await
            }
        });
        let connection = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(limits.timeout)
            .keep_alive(false)
            .max_buf_size(limits.max_request_bytes.max(MAX_REQUEST_BYTES))
            .title_case_headers(true)
            .serve_connection(TokioIo::new(stream), TowerToHyperService::new(service));
        let counters = Arc::clone(&counters);
        let mut stop = stop.clone();
        connections.spawn(async move {
            let mut connection = std::pin::pin!(connection);
            tokio::select! {
                _ = connection.as_mut() => {}
                _ = tokio::time::sleep(lifetime) => {
                    counters.cut_off.fetch_add(1, Ordering::Relaxed);
                }
                _ = stop.changed() => {}
            }
            drop(permit);
        });
    }
    connections.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bucket_refills_at_its_rate_and_holds_one_second() {
        let mut b = TokenBucket::new(10);
        let t0 = b.last;
        assert!((0..10).all(|_| b.take(t0)), "a second's burst");
        assert!(!b.take(t0));
        assert!(b.take(t0 + Duration::from_millis(100)), "one token after 100 ms");
        assert!(!b.take(t0 + Duration::from_millis(100)));
        let later = t0 + Duration::from_secs(60);
        assert_eq!((0..100).filter(|_| b.take(later)).count(), 10, "never more than a second stored");
    }

    fn server(limits: HttpLimits) -> HttpServer {
        let router = Router::new().route("/", axum::routing::get(|| async { "hello" }));
        HttpServer::start("127.0.0.1:0".parse().unwrap(), router, limits, "test-http").unwrap()
    }

    fn get(addr: SocketAddr) -> String {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        out
    }

    #[test]
    fn connections_past_the_limit_are_closed_at_once_and_idle_ones_cut_off() {
        use std::io::Read;
        let limits =
            HttpLimits { max_connections: 2, timeout: Duration::from_millis(400), ..HttpLimits::default() };
        let s = server(limits);
        let addr = s.local_addr();
        let held: Vec<_> = (0..2).map(|_| std::net::TcpStream::connect(addr).unwrap()).collect();
        std::thread::sleep(Duration::from_millis(100));
        let mut third = std::net::TcpStream::connect(addr).unwrap();
        third.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let started = Instant::now();
        let mut rest = Vec::new();
        let _ = third.read_to_end(&mut rest);
        assert!(
            rest.is_empty() && started.elapsed() < Duration::from_millis(300),
            "closed at once: {rest:?}"
        );
        assert!(s.counters().refused_connections.load(Ordering::Relaxed) >= 1);
        for mut idle in held {
            idle.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let _ = idle.read_to_end(&mut rest);
        }
        assert!(started.elapsed() < Duration::from_secs(2), "idle clients cut off after the timeout");
        assert!(get(addr).ends_with("hello"), "served again once the idle ones are gone");
        s.stop();
    }

    #[test]
    fn requests_past_the_rate_are_answered_429() {
        let s = server(HttpLimits { requests_per_sec: 5, ..HttpLimits::default() });
        let answers: Vec<String> = (0..12).map(|_| get(s.local_addr())).collect();
        let ok = answers.iter().filter(|a| a.starts_with("HTTP/1.1 200 ")).count();
        let limited = answers.iter().filter(|a| a.starts_with("HTTP/1.1 429 ")).count();
        assert_eq!(ok + limited, 12, "{answers:?}");
        assert!((5..=7).contains(&ok), "a second's burst, and what refilled meanwhile: {ok}");
        assert!(answers.iter().any(|a| a.contains("Retry-After: 1")), "{answers:?}");
        assert_eq!(s.counters().rate_limited.load(Ordering::Relaxed), limited as u64);
    }
}
