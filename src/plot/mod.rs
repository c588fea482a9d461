//! Pictures of the appliance's numbers, drawn on the server: latency
//! percentile plots (the log-scaled percentile axis of HdrHistogram plots),
//! recent p50/p99 time series and sample line plots as SVG (plotters), and
//! two-dimensional frames as grey-scale PNG images (png). The live view and
//! the HTML reports embed what these functions return.

pub mod image;
pub mod report;

pub use image::{GrayImage, PreviewScaling};

use plotters::coord::Shift;
use plotters::prelude::*;
use thiserror::Error;

/// Errors of drawing or encoding a picture.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum PlotError {
    /// plotters refused the drawing (its message kept).
    #[error("cannot draw the {what} plot: {message}")]
    Draw { what: &'static str, message: String },
    /// The PNG encoder failed.
    #[error("cannot encode the preview as PNG: {0}")]
    Png(#[from] ::png::EncodingError),
    /// Image dimensions that do not match the pixels given.
    #[error("an image of {width}x{height} needs {needed} pixels but got {got}")]
    BadImage { width: u32, height: u32, needed: usize, got: usize },
}

fn draw_err<E: std::fmt::Debug>(what: &'static str) -> impl Fn(E) -> PlotError {
    move |e| PlotError::Draw { what, message: format!("{e:?}") }
}

/// The legend of a chart's labelled series, in its top-left corner.
fn draw_legend<'a, DB: DrawingBackend + 'a, CT: CoordTranslate>(
    chart: &mut ChartContext<'a, DB, CT>,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.3))
        .draw()
}

/// One line of a percentile plot: a name and (quantile in 0..=1, µs) points,
/// for example a segment's [`crate::metrics::PercentileCurve`] or a bench
/// mode's p50..max.
#[derive(Debug, Clone, PartialEq)]
pub struct CurveSeries {
    pub name: String,
    /// Values recorded: where the maximum (q = 1) is drawn on the axis.
    pub count: u64,
    pub points: Vec<(f64, f64)>,
}

/// A horizontal line across a percentile plot: a floor no mode can beat.
#[derive(Debug, Clone, PartialEq)]
pub struct FloorLine {
    pub name: String,
    pub us: f64,
}

/// Rightmost point of the percentile axis, `1 / (1 - q)` for q = 99.9999 %.
const AXIS_END: f64 = 1e6;

/// Where quantile `q` lies on the log percentile axis (`1 / (1 - q)`); the
/// maximum (q = 1) at `count`, the rank it has among `count` values.
pub fn percentile_axis(q: f64, count: u64) -> f64 {
    if q >= 1.0 {
        return (count as f64).clamp(2.0, AXIS_END);
    }
    (1.0 / (1.0 - q)).clamp(1.0, AXIS_END)
}

/// The percentile label of an axis position: 1 → "0%", 100 → "99%".
fn percentile_label(x: &f64) -> String {
    let p = 100.0 * (1.0 - 1.0 / x);
    if p < 1e-9 {
        "0%".into()
    } else {
        let s = format!("{p:.4}");
        format!("{}%", s.trim_end_matches('0').trim_end_matches('.'))
    }
}

fn series_style(index: usize) -> ShapeStyle {
    Palette99::pick(index).stroke_width(2)
}

/// The percentile distribution of every series (and floors as horizontal
/// lines) on one plot: percentile on a log axis, latency (µs) upwards, as
/// HdrHistogram's plotter draws it. Empty series are left out.
pub fn percentile_svg(
    title: &str,
    series: &[CurveSeries],
    floors: &[FloorLine],
) -> Result<String, PlotError> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (760, 420)).into_drawing_area();
        draw_percentiles(&root, title, series, floors)?;
        root.present().map_err(draw_err("percentile"))?;
    }
    Ok(svg)
}

fn draw_percentiles(
    root: &DrawingArea<SVGBackend<'_>, Shift>,
    title: &str,
    series: &[CurveSeries],
    floors: &[FloorLine],
) -> Result<(), PlotError> {
    let err = draw_err("percentile");
    root.fill(&WHITE).map_err(&err)?;
    let top = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .chain(floors.iter().map(|f| f.us))
        .fold(0.0f64, f64::max);
    let y_top = if top > 0.0 { top * 1.1 } else { 1.0 };
    let mut chart = ChartBuilder::on(root)
        .caption(title, ("sans-serif", 18))
        .margin(10)
        .margin_right(40)
        .x_label_area_size(36)
        .y_label_area_size(60)
        .build_cartesian_2d((1.0f64..AXIS_END).log_scale(), 0.0f64..y_top)
        .map_err(&err)?;
    chart
        .configure_mesh()
        .x_desc("percentile")
        .y_desc("latency (µs)")
        .x_label_formatter(&percentile_label)
        .draw()
        .map_err(&err)?;
    for (i, s) in series.iter().filter(|s| !s.points.is_empty()).enumerate() {
        let style = series_style(i);
        // Quantiles finer than one value in `count` repeat the maximum: the
        // line ends at the maximum, drawn at its rank.
        let points: Vec<(f64, f64)> = s
            .points
            .iter()
            .filter(|&&(q, _)| q >= 1.0 || s.count == 0 || 1.0 / (1.0 - q) < s.count as f64)
            .map(|&(q, us)| (percentile_axis(q, s.count), us))
            .collect();
        chart
            .draw_series(LineSeries::new(points.clone(), style))
            .map_err(&err)?
            .label(s.name.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], style));
        chart.draw_series(points.into_iter().map(|p| Circle::new(p, 3, style.filled()))).map_err(&err)?;
    }
    for (i, f) in floors.iter().enumerate() {
        let style = ShapeStyle { color: BLACK.mix(0.6), filled: false, stroke_width: 1 };
        let dash = series.len() + i;
        chart
            .draw_series(DashedLineSeries::new(vec![(1.0, f.us), (AXIS_END, f.us)], 6, 4, style))
            .map_err(&err)?
            .label(format!("floor: {}", f.name))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], Palette99::pick(dash)));
    }
    if !series.is_empty() || !floors.is_empty() {
        draw_legend(&mut chart).map_err(&err)?;
    }
    Ok(())
}

/// Recent values over time: each series' (seconds, µs) points, for example
/// the end-to-end p50 and p99 of the last minutes.
pub fn timeseries_svg(title: &str, series: &[(String, Vec<(f64, f64)>)]) -> Result<String, PlotError> {
    let err = draw_err("time series");
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (760, 300)).into_drawing_area();
        root.fill(&WHITE).map_err(&err)?;
        let all = || series.iter().flat_map(|s| s.1.iter());
        let (x0, x1) = all().fold((f64::MAX, f64::MIN), |(lo, hi), p| (lo.min(p.0), hi.max(p.0)));
        let (x0, x1) = if x0 < x1 { (x0, x1) } else { (x0.min(0.0), x0.max(0.0) + 1.0) };
        let top = all().map(|p| p.1).fold(0.0f64, f64::max);
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(10)
            .x_label_area_size(36)
            .y_label_area_size(60)
            .build_cartesian_2d(x0..x1, 0.0f64..if top > 0.0 { top * 1.1 } else { 1.0 })
            .map_err(&err)?;
        chart.configure_mesh().x_desc("seconds").y_desc("latency (µs)").draw().map_err(&err)?;
        for (i, (name, points)) in series.iter().enumerate() {
            let style = series_style(i);
            chart
                .draw_series(LineSeries::new(points.iter().copied(), style))
                .map_err(&err)?
                .label(name.clone())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], style));
        }
        draw_legend(&mut chart).map_err(&err)?;
        root.present().map_err(&err)?;
    }
    Ok(svg)
}

/// Most points a line plot of samples draws; longer signals are decimated
/// (each drawn point the largest magnitude of its run of samples).
pub const MAX_LINE_POINTS: usize = 2048;

/// A one-dimensional signal as a line: sample index (or bin) along, value
/// upwards. `x_desc` names the axis, for example "sample" or "bin".
pub fn samples_svg(title: &str, x_desc: &str, y_desc: &str, samples: &[f32]) -> Result<String, PlotError> {
    let err = draw_err("samples");
    let step = samples.len().div_ceil(MAX_LINE_POINTS).max(1);
    let points: Vec<(f64, f64)> = samples
        .chunks(step)
        .enumerate()
        .map(|(i, run)| {
            let v = run
                .iter()
                .copied()
                .filter(|v| v.is_finite())
                .fold(0.0f32, |a, b| if b.abs() > a.abs() { b } else { a });
            ((i * step) as f64, f64::from(v))
        })
        .collect();
    let (lo, hi) = points.iter().fold((0.0f64, 0.0f64), |(lo, hi), p| (lo.min(p.1), hi.max(p.1)));
    let (lo, hi) = if hi > lo { (lo, hi) } else { (lo - 1.0, hi + 1.0) };
    let pad = (hi - lo) * 0.05;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (760, 300)).into_drawing_area();
        root.fill(&WHITE).map_err(&err)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(10)
            .x_label_area_size(36)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0f64..(samples.len().max(1)) as f64, (lo - pad)..(hi + pad))
            .map_err(&err)?;
        chart.configure_mesh().x_desc(x_desc).y_desc(y_desc).draw().map_err(&err)?;
        chart.draw_series(LineSeries::new(points, series_style(0))).map_err(&err)?;
        root.present().map_err(&err)?;
    }
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_percentile_axis_is_one_over_one_minus_q() {
        assert_eq!(percentile_axis(0.0, 10), 1.0);
        assert!((percentile_axis(0.99, 10) - 100.0).abs() < 1e-9);
        assert_eq!(percentile_axis(1.0, 5000), 5000.0, "the maximum at its rank");
        assert_eq!(percentile_axis(1.0, u64::MAX), AXIS_END);
        assert_eq!(percentile_label(&1.0), "0%");
        assert_eq!(percentile_label(&1000.0), "99.9%");
    }

    #[test]
    fn plots_are_svg_with_every_series_named() {
        let series = vec![
            CurveSeries {
                name: "end_to_end".into(),
                count: 1000,
                points: vec![(0.5, 10.0), (0.99, 30.0), (1.0, 45.0)],
            },
            CurveSeries { name: "gpu".into(), count: 1000, points: vec![(0.5, 4.0), (0.99, 9.0)] },
        ];
        let floors = [FloorLine { name: "round trip".into(), us: 3.0 }];
        let svg = percentile_svg("latency", &series, &floors).unwrap();
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"), "{svg}");
        for name in ["end_to_end", "gpu", "floor: round trip", "99%", "percentile"] {
            assert!(svg.contains(name), "{name} missing");
        }
        assert!(svg.matches("<polyline").count() >= 3, "two lines and a floor");
        let ts = timeseries_svg("recent", &[("p99".into(), vec![(-2.0, 5.0), (-1.0, 7.0)])]).unwrap();
        assert!(ts.contains("<polyline") && ts.contains("p99"));
        let empty = timeseries_svg("recent", &[]).unwrap();
        assert!(empty.contains("<svg"));
        let long: Vec<f32> = (0..10_000).map(|i| (i as f32 * 0.01).sin()).collect();
        let line = samples_svg("signal", "sample", "value", &long).unwrap();
        let polyline = line.split("<polyline").nth(1).unwrap();
        let points = polyline.split("points=\"").nth(1).unwrap().split('"').next().unwrap();
        assert!(points.split_whitespace().count() <= MAX_LINE_POINTS, "decimated");
        assert!(samples_svg("flat", "sample", "value", &[]).is_ok());
    }
}
