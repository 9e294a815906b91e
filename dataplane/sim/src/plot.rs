//! PNG charts in the manner of the AdaCache paper's Figures 10-13: I/O
//! volumes, hit ratios, metadata memory, and average missed request size vs
//! average allocated block size, one group of bars per configuration.

use std::path::{Path, PathBuf};
use std::sync::Once;

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use plotters::style::{register_font, FontStyle};

use crate::report::Report;

/// Where the font for chart text comes from (Debian's fonts-dejavu-core).
const FONT_PATHS: [&str; 2] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
];

static FONT: Once = Once::new();

/// Registers the chart font once per process.
pub(crate) fn ensure_font() -> Result<(), String> {
    let mut result = Ok(());
    FONT.call_once(|| {
        let Some(bytes) = FONT_PATHS.iter().find_map(|p| std::fs::read(p).ok()) else {
            result = Err(format!(
                "no font for chart text: install Debian's fonts-dejavu-core (looked in {})",
                FONT_PATHS.join(", ")
            ));
            return;
        };
        // plotters keeps registered fonts for the life of the process.
        let leaked: &'static [u8] = Box::leak(bytes.into_boxed_slice());
        if register_font("sans-serif", FontStyle::Normal, leaked).is_err() {
            result = Err("the chart font could not be parsed".into());
        }
    });
    result
}

/// One series of a grouped bar chart: a label and one value per group.
struct Series<'a> {
    label: &'a str,
    values: Vec<f64>,
}

pub(crate) const PALETTE: [RGBColor; 4] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xd6, 0x27, 0x28),
];

fn grouped_bars(
    path: &Path,
    title: &str,
    y_label: &str,
    groups: &[String],
    series: &[Series<'_>],
) -> Result<(), String> {
    let err = |e: &dyn std::fmt::Display| format!("plot {}: {e}", path.display());
    let max = series
        .iter()
        .flat_map(|s| s.values.iter().copied())
        .fold(0.0f64, f64::max)
        .max(f64::MIN_POSITIVE);
    let root = BitMapBackend::new(path, (960, 540)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let n_groups = groups.len();
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 24))
        .margin(16)
        .x_label_area_size(40)
        .y_label_area_size(80)
        .build_cartesian_2d(0f64..n_groups as f64, 0f64..max * 1.45)
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .y_desc(y_label)
        .draw()
        .map_err(|e| err(&e))?;
    // Group names centred above each group of bars (the mesh's own x labels
    // would sit at group edges); the band above them is the legend's.
    let label_style =
        TextStyle::from(("sans-serif", 16).into_font()).pos(Pos::new(HPos::Center, VPos::Bottom));
    chart
        .draw_series(
            groups.iter().enumerate().map(|(i, g)| {
                Text::new(g.clone(), (i as f64 + 0.5, max * 1.08), label_style.clone())
            }),
        )
        .map_err(|e| err(&e))?;
    let width = 0.8 / series.len().max(1) as f64;
    for (si, s) in series.iter().enumerate() {
        let color = PALETTE[si % PALETTE.len()];
        chart
            .draw_series(s.values.iter().enumerate().map(|(gi, &v)| {
                let x0 = gi as f64 + 0.1 + si as f64 * width;
                Rectangle::new([(x0, 0.0), (x0 + width * 0.95, v)], color.filled())
            }))
            .map_err(|e| err(&e))?
            .label(s.label)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], color.filled()));
    }
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

const MIB: f64 = (1u64 << 20) as f64;
const KIB: f64 = 1024.0;

/// Writes the four charts into `dir` and returns their paths.
pub fn write_charts(
    dir: &Path,
    trace_name: &str,
    reports: &[Report],
) -> Result<Vec<PathBuf>, String> {
    ensure_font()?;
    std::fs::create_dir_all(dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    let groups: Vec<String> = reports.iter().map(|r| r.config.clone()).collect();
    let col = |f: &dyn Fn(&Report) -> f64| reports.iter().map(f).collect::<Vec<f64>>();
    let mut written = Vec::new();

    let p = dir.join("io-volumes.png");
    grouped_bars(
        &p,
        &format!("I/O volumes: {trace_name}"),
        "MiB",
        &groups,
        &[
            Series {
                label: "write-to-core",
                values: col(&|r| r.write_to_core as f64 / MIB),
            },
            Series {
                label: "read-from-core",
                values: col(&|r| r.read_from_core as f64 / MIB),
            },
            Series {
                label: "write-to-cache",
                values: col(&|r| r.write_to_cache as f64 / MIB),
            },
            Series {
                label: "read-from-cache",
                values: col(&|r| r.read_from_cache as f64 / MIB),
            },
        ],
    )?;
    written.push(p);

    let p = dir.join("hit-ratios.png");
    grouped_bars(
        &p,
        &format!("Hit ratios: {trace_name}"),
        "hit ratio (%)",
        &groups,
        &[
            Series {
                label: "read",
                values: col(&|r| r.read_hit_ratio * 100.0),
            },
            Series {
                label: "write",
                values: col(&|r| r.write_hit_ratio * 100.0),
            },
        ],
    )?;
    written.push(p);

    let p = dir.join("metadata.png");
    grouped_bars(
        &p,
        &format!("Metadata memory: {trace_name}"),
        "KiB",
        &groups,
        &[
            Series {
                label: "average",
                values: col(&|r| r.metadata_avg as f64 / KIB),
            },
            Series {
                label: "peak",
                values: col(&|r| r.metadata_peak as f64 / KIB),
            },
        ],
    )?;
    written.push(p);

    let p = dir.join("block-vs-request.png");
    grouped_bars(
        &p,
        &format!("Avg missed request vs avg allocated block: {trace_name}"),
        "KiB",
        &groups,
        &[
            Series {
                label: "avg missed request",
                values: col(&|r| r.avg_missed_request / KIB),
            },
            Series {
                label: "avg allocated block",
                values: col(&|r| r.avg_allocated_block / KIB),
            },
        ],
    )?;
    written.push(p);
    Ok(written)
}
