//! A plot of one metric against threads, one line per variant, as SVG.

use std::collections::BTreeMap;
use std::path::Path;

use plotters::prelude::*;
use serde_json::{Map, Value};

use super::{LabError, LabResult, Report};

/// Draws `metric` (medians, with min-max whiskers) against the thread count for every variant
/// that has rows matching `extra`, and writes it to `path` as SVG.
pub fn plot(
    report: &Report,
    metric: &str,
    extra: &Map<String, Value>,
    path: &Path,
) -> LabResult<()> {
    let mut lines: BTreeMap<&str, Vec<(usize, f64, f64, f64)>> = BTreeMap::new();
    for r in report
        .rows
        .iter()
        .filter(|r| r.metric == metric && extra.iter().all(|(k, v)| r.extra.get(k) == Some(v)))
    {
        lines
            .entry(r.variant.as_str())
            .or_default()
            .push((r.threads, r.median, r.min, r.max));
    }
    if lines.is_empty() {
        return Err(LabError(format!("nothing to plot for metric {metric}")));
    }
    let max_t = lines
        .values()
        .flatten()
        .map(|p| p.0)
        .max()
        .unwrap_or(1)
        .max(2);
    let max_y = lines.values().flatten().map(|p| p.3).fold(0.0f64, f64::max) * 1.1;
    let err = |e: &dyn std::fmt::Display| LabError(format!("plotting {}: {e}", path.display()));
    {
        let root = SVGBackend::new(path, (800, 500)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| err(&e))?;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                format!("{}: {metric} vs threads", report.scenario),
                ("sans-serif", 20),
            )
            .margin(15)
            .x_label_area_size(40)
            .y_label_area_size(80)
            .build_cartesian_2d(0usize..max_t + 1, 0f64..max_y.max(1e-9))
            .map_err(|e| err(&e))?;
        chart
            .configure_mesh()
            .x_desc("threads")
            .y_desc(metric)
            .y_label_formatter(&|v| format!("{v:.2e}"))
            .draw()
            .map_err(|e| err(&e))?;
        for (i, (variant, mut pts)) in lines.into_iter().enumerate() {
            pts.sort_by_key(|p| p.0);
            let color = Palette99::pick(i).to_rgba();
            chart
                .draw_series(LineSeries::new(
                    pts.iter().map(|p| (p.0, p.1)),
                    color.stroke_width(2),
                ))
                .map_err(|e| err(&e))?
                .label(variant.to_string())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
            chart
                .draw_series(
                    pts.iter().map(|p| {
                        PathElement::new(vec![(p.0, p.2), (p.0, p.3)], color.stroke_width(1))
                    }),
                )
                .map_err(|e| err(&e))?;
            chart
                .draw_series(
                    pts.iter()
                        .map(|p| Circle::new((p.0, p.1), 3, color.filled())),
                )
                .map_err(|e| err(&e))?;
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(|e| err(&e))?;
        root.present().map_err(|e| err(&e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::Interleaver;

    #[test]
    fn writes_an_svg_with_every_variant() {
        let mut r = Report::new("t", "s.txt", serde_json::json!({}));
        let mut il = Interleaver::new();
        for t in [1, 2, 4] {
            il.add("cas-loop", t, "ops_per_sec", 1e7 * t as f64);
            il.add("locked-bit", t, "ops_per_sec", 1.2e7 * t as f64);
        }
        r.add_rows(&il, &Map::new());
        let dir = std::env::temp_dir().join(format!("foliocache-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("p.svg");
        plot(&r, "ops_per_sec", &Map::new(), &path).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.starts_with("<svg"));
        assert!(svg.contains("locked-bit") && svg.contains("cas-loop"));
        assert!(plot(&r, "nope", &Map::new(), &path).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
