//! `--mrc --plot DIR`: one PNG per curve, miss ratio against cache size,
//! SHARDS's curve and (when computed) the exact one on the same axes.

use std::path::{Path, PathBuf};

use plotters::prelude::*;

use crate::mrc::VolumeCurve;
use crate::plot::{ensure_font, PALETTE};

/// Points per drawn line: enough for the eye, few enough that an exact
/// curve with one point per block does not bloat the drawing.
const STEPS: u64 = 400;

const MIB: f64 = (1u64 << 20) as f64;

/// Writes `mrc-volume-N.png` (and `mrc-all.png` for all volumes together)
/// into `dir`; returns their paths.
pub fn write_mrc_charts(
    dir: &Path,
    trace_name: &str,
    curves: &[VolumeCurve],
) -> Result<Vec<PathBuf>, String> {
    ensure_font()?;
    std::fs::create_dir_all(dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    let mut written = Vec::new();
    for c in curves {
        let file = match c.volume {
            Some(v) => format!("mrc-volume-{v}.png"),
            None => "mrc-all.png".into(),
        };
        let p = dir.join(file);
        draw(
            &p,
            &format!("Miss-ratio curve: {trace_name}, {}", c.label()),
            c,
        )?;
        written.push(p);
    }
    Ok(written)
}

fn draw(path: &Path, title: &str, c: &VolumeCurve) -> Result<(), String> {
    let err = |e: &dyn std::fmt::Display| format!("plot {}: {e}", path.display());
    let ws = c.working_set_bytes.max(1);
    let x_max = ws as f64 / MIB;
    let root = BitMapBackend::new(path, (960, 540)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(64)
        .build_cartesian_2d(0f64..x_max, 0f64..1.0)
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc("LRU cache size (MiB)")
        .y_desc("miss ratio")
        .draw()
        .map_err(|e| err(&e))?;
    let line = |curve: &engine::mrc::Curve| -> Vec<(f64, f64)> {
        (0..=STEPS)
            .map(|i| {
                let bytes = ws * i / STEPS;
                (bytes as f64 / MIB, curve.miss_ratio(bytes))
            })
            .collect()
    };
    if let Some(exact) = &c.exact {
        let color = PALETTE[1];
        chart
            .draw_series(DashedLineSeries::new(
                line(exact),
                10,
                6,
                color.stroke_width(3),
            ))
            .map_err(|e| err(&e))?
            .label("exact")
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], color.stroke_width(3)));
    }
    let color = PALETTE[0];
    chart
        .draw_series(LineSeries::new(line(&c.sampled), color.stroke_width(2)))
        .map_err(|e| err(&e))?
        .label(format!("SHARDS (rate {:.3} at the end)", c.rate))
        .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], color.stroke_width(2)));
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperRight)
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}
