//! Live reload of the config: validate the new config, classify what changed
//! ([`diff`]), hand a parameter or shape change to the running chain (it
//! switches between two frames, under a new parameter generation), and
//! refuse what needs a restart, changing nothing.
//!
//! Triggers: SIGHUP (`systemctl reload`, the unit's `ExecReload`) and
//! `frameloop reload` ([`trigger`]), which sends SIGHUP to a process started
//! by hand.

pub mod diff;
pub mod trigger;

pub use diff::{ChangeClass, ChangedKey, ConfigChange, classify};
pub use trigger::{ReloadArgs, ReloadError, send_reload};

use crate::backend::LiveChain;
use crate::config::{Config, ConfigError};

/// What one reload did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReloadOutcome {
    /// The new config equals the running one.
    Unchanged,
    /// Operator parameters changed; frames from the next claim on run with `generation`.
    AppliedParams { generation: u32 },
    /// The chain's shape changed; it was rebuilt and frames from the next
    /// claim on run with `generation`.
    AppliedShape { generation: u32 },
    /// A change only a restart applies (or a backend that applies every
    /// change on restart): nothing changed.
    RefusedRestart,
    /// The new config is invalid: nothing changed.
    RejectedInvalid,
}

/// Reloads counted by outcome.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReloadCounts {
    pub applied_params: u64,
    pub applied_shape: u64,
    pub refused_restart: u64,
    pub rejected_invalid: u64,
}

impl ReloadCounts {
    /// `(outcome label, count)` pairs, for the metrics endpoint.
    pub fn labelled(&self) -> Vec<(String, u64)> {
        [
            ("applied_params", self.applied_params),
            ("applied_shape", self.applied_shape),
            ("refused_restart", self.refused_restart),
            ("rejected_invalid", self.rejected_invalid),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }

    fn count(&mut self, outcome: ReloadOutcome) {
        match outcome {
            ReloadOutcome::Unchanged => {}
            ReloadOutcome::AppliedParams { .. } => self.applied_params += 1,
            ReloadOutcome::AppliedShape { .. } => self.applied_shape += 1,
            ReloadOutcome::RefusedRestart => self.refused_restart += 1,
            ReloadOutcome::RejectedInvalid => self.rejected_invalid += 1,
        }
    }
}

/// The reload state of a running appliance: the config it runs and the
/// handle on its chain.
pub struct Reloader {
    running: Config,
    /// `None` for a backend that applies chain changes only on restart.
    live: Option<Box<dyn LiveChain>>,
    backend: &'static str,
    /// Generation of the last chain handed to the loop (0: the start-up config).
    generation: u32,
    counts: ReloadCounts,
}

impl Reloader {
    /// The appliance started with `running` on `backend`; `live` is its
    /// backend's handle on the chain, if it has one.
    pub fn new(running: Config, live: Option<Box<dyn LiveChain>>, backend: &'static str) -> Self {
        Self { running, live, backend, generation: 0, counts: ReloadCounts::default() }
    }

    /// The config the appliance runs now (the last one applied).
    pub fn running(&self) -> &Config {
        &self.running
    }

    /// The generation of the chain the loop runs now (0 until a reload's
    /// chain has run its first claim).
    pub fn applied_generation(&self) -> u32 {
        self.live.as_ref().map_or(0, |l| l.applied_generation())
    }

    pub fn counts(&self) -> ReloadCounts {
        self.counts
    }

    /// A reload whose config could not be read or parsed: each problem is
    /// logged with its key, counted as invalid; nothing changes.
    pub fn reject(&mut self, error: &ConfigError) -> ReloadOutcome {
        match error {
            ConfigError::Invalid(problems) => {
                for p in problems {
                    tracing::error!("reload rejected, the running config is kept: {p}");
                }
            }
            ConfigError::Read { .. } => {
                tracing::error!("reload rejected, the running config is kept: {error}")
            }
        }
        self.finish(ReloadOutcome::RejectedInvalid)
    }

    /// Validates `new`, then applies what changed: parameters and chain
    /// shape go to the running loop, anything else is refused with the keys
    /// that need a restart. An invalid or refused config changes nothing.
    pub fn apply(&mut self, new: Config) -> ReloadOutcome {
        let problems = new.problems();
        if !problems.is_empty() {
            return self.reject(&ConfigError::Invalid(problems));
        }
        let change = classify(&self.running, &new);
        let Some(class) = change.class() else {
            tracing::info!("reload: the config is unchanged");
            return self.finish(ReloadOutcome::Unchanged);
        };
        if class == ChangeClass::Restart {
            for k in change.of(ChangeClass::Restart) {
                tracing::warn!(
                    "reload refused, nothing changed: {} changed ({} -> {}) and needs a restart \
                     (systemctl restart frameloop)",
                    k.key,
                    k.from,
                    k.to
                );
            }
            return self.finish(ReloadOutcome::RefusedRestart);
        }
        let Some(live) = self.live.as_mut() else {
            tracing::warn!(
                "reload refused, nothing changed: the {} backend applies parameter changes on restart ({})",
                self.backend,
                change.summary()
            );
            return self.finish(ReloadOutcome::RefusedRestart);
        };
        let generation = self.generation.wrapping_add(1);
        if let Err(errors) = live.stage(&new.chain, generation) {
            for e in errors {
                tracing::error!("reload rejected, the running config is kept: {e}");
            }
            return self.finish(ReloadOutcome::RejectedInvalid);
        }
        self.generation = generation;
        self.running = new;
        let outcome = match class {
            ChangeClass::Parameter => ReloadOutcome::AppliedParams { generation },
            _ => ReloadOutcome::AppliedShape { generation },
        };
        tracing::info!("reload applied as parameter generation {generation}: {}", change.summary());
        self.finish(outcome)
    }

    fn finish(&mut self, outcome: ReloadOutcome) -> ReloadOutcome {
        self.counts.count(outcome);
        outcome
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::{ChainError, OpSpec, default_chain};
    use std::sync::{Arc, Mutex};

    /// `(chain length, generation)` of every chain staged.
    type Staged = Arc<Mutex<Vec<(usize, u32)>>>;

    /// Records what was staged; refuses chains longer than `max_ops`.
    struct Recording {
        staged: Staged,
        max_ops: usize,
    }

    impl LiveChain for Recording {
        fn stage(&mut self, chain: &[OpSpec], generation: u32) -> Result<(), Vec<ChainError>> {
            if chain.len() > self.max_ops {
                return Err(vec![ChainError::Empty]);
            }
            self.staged.lock().unwrap().push((chain.len(), generation));
            Ok(())
        }
        fn applied_generation(&self) -> u32 {
            self.staged.lock().unwrap().last().map_or(0, |s| s.1)
        }
    }

    fn reloader(max_ops: usize) -> (Reloader, Staged) {
        let staged = Arc::new(Mutex::new(Vec::new()));
        let live = Recording { staged: Arc::clone(&staged), max_ops };
        (Reloader::new(Config::default(), Some(Box::new(live)), "host"), staged)
    }

    fn with_level(level: f32) -> Config {
        let mut cfg = Config::default();
        cfg.chain[3] = OpSpec::Threshold { level };
        cfg
    }

    #[test]
    fn parameters_and_shape_are_staged_under_new_generations() {
        let (mut r, staged) = reloader(8);
        assert_eq!(r.apply(with_level(3.0)), ReloadOutcome::AppliedParams { generation: 1 });
        let mut shape = with_level(3.0);
        shape.chain.insert(1, OpSpec::Delay { us: 0 });
        assert_eq!(r.apply(shape.clone()), ReloadOutcome::AppliedShape { generation: 2 });
        assert_eq!(r.apply(shape), ReloadOutcome::Unchanged);
        assert_eq!(*staged.lock().unwrap(), vec![(4, 1), (5, 2)]);
        assert_eq!(r.applied_generation(), 2);
        assert_eq!(r.running().chain.len(), 5);
        let c = r.counts();
        assert_eq!((c.applied_params, c.applied_shape, c.refused_restart, c.rejected_invalid), (1, 1, 0, 0));
    }

    #[test]
    fn invalid_restart_and_unrunnable_configs_change_nothing() {
        let (mut r, staged) = reloader(4);
        assert_eq!(r.apply(with_level(f32::NAN)), ReloadOutcome::RejectedInvalid);
        let mut restart = with_level(3.0);
        restart.ring.slots = 8;
        assert_eq!(r.apply(restart), ReloadOutcome::RefusedRestart);
        let mut too_long = Config::default();
        too_long.chain.push(OpSpec::Delay { us: 0 });
        assert_eq!(r.apply(too_long), ReloadOutcome::RejectedInvalid, "the backend refused the chain");
        assert!(staged.lock().unwrap().is_empty());
        assert_eq!(r.running(), &Config::default());
        assert_eq!(
            r.counts(),
            ReloadCounts { refused_restart: 1, rejected_invalid: 2, ..Default::default() }
        );
        // The next applied change takes generation 1: refusals use none.
        assert_eq!(r.apply(with_level(3.0)), ReloadOutcome::AppliedParams { generation: 1 });
    }

    #[test]
    fn a_backend_without_a_live_chain_refuses_chain_changes() {
        let mut r = Reloader::new(Config::default(), None, "restart-only");
        assert_eq!(r.apply(with_level(3.0)), ReloadOutcome::RefusedRestart);
        assert_eq!(r.running(), &Config::default());
        assert_eq!(r.applied_generation(), 0);
        let labelled = r.counts().labelled();
        assert!(labelled.contains(&("refused_restart".to_string(), 1)), "{labelled:?}");
        assert_eq!(default_chain(), r.running().chain);
    }
}
