//! PNG plots of evaluation results (plotters, bitmap backend), drawn with the
//! DejaVu Sans font committed in `api/assets/` so no system font is needed.

use std::path::Path;
use std::sync::Once;

use anyhow::Context;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

static FONT: &[u8] = include_bytes!("../../assets/DejaVuSans.ttf");
const FAMILY: &str = "sans-serif";
const SIZE: (u32, u32) = (900, 540);

fn register_font() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        plotters::style::register_font(FAMILY, FontStyle::Normal, FONT)
            .unwrap_or_else(|_| panic!("the committed DejaVuSans.ttf is a valid font"));
    });
}

/// One line of a line plot.
pub struct Series {
    /// Legend entry (not shown for a single series).
    pub name: String,
    /// (x, y) points (y in [0, 1] for [`lines`]).
    pub points: Vec<(f64, f64)>,
}

/// Axis titles of a plot.
pub struct Labels<'a> {
    /// Caption above the plot.
    pub title: &'a str,
    /// X axis title.
    pub x: &'a str,
    /// Y axis title.
    pub y: &'a str,
}

/// Draws `series` (y from 0 to 1) into the PNG file `path`.
pub fn lines(path: &Path, labels: &Labels, series: &[Series]) -> anyhow::Result<()> {
    lines_in(path, labels, series, Some((0.0, 1.02)))
}

/// Draws `series` into the PNG file `path` with the y axis over `y` (`None`: the data's range).
pub fn lines_in(
    path: &Path,
    labels: &Labels,
    series: &[Series],
    y: Option<(f64, f64)>,
) -> anyhow::Result<()> {
    register_font();
    // Accuracies end high on the right; losses over the data's range start high on the left.
    let legend = if y.is_some() {
        SeriesLabelPosition::LowerRight
    } else {
        SeriesLabelPosition::UpperLeft
    };
    let y =
        y.unwrap_or_else(|| data_range(series.iter().flat_map(|s| s.points.iter().map(|p| p.1))));
    draw_lines(path, labels, series, y, legend)
        .with_context(|| format!("drawing {}", path.display()))
}

/// The range of `values` with 5% of room each side (0..1 when empty, ±0.5 when flat).
fn data_range(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (lo, hi) = values
        .filter(|v| v.is_finite())
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| {
            (a.min(v), b.max(v))
        });
    if !lo.is_finite() {
        return (0.0, 1.0);
    }
    if hi - lo < 1e-9 {
        return (lo - 0.5, hi + 0.5);
    }
    let pad = (hi - lo) * 0.05;
    (lo - pad, hi + pad)
}

fn draw_lines(
    path: &Path,
    labels: &Labels,
    series: &[Series],
    (y0, y1): (f64, f64),
    legend: SeriesLabelPosition,
) -> anyhow::Result<()> {
    let xs = series.iter().flat_map(|s| s.points.iter().map(|p| p.0));
    let (mut x0, mut x1) = xs.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), x| {
        (a.min(x), b.max(x))
    });
    if !x0.is_finite() {
        (x0, x1) = (0.0, 1.0);
    }
    if x1 - x0 < 1e-9 {
        (x0, x1) = (x0 - 0.5, x1 + 0.5);
    }
    let pad = (x1 - x0) * 0.03;
    let integral = series
        .iter()
        .flat_map(|s| &s.points)
        .all(|p| p.0.fract() == 0.0);
    let x_format = |x: &f64| {
        if integral {
            format!("{x:.0}")
        } else {
            format!("{x:.2}")
        }
    };
    let root = BitMapBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(labels.title, (FAMILY, 24))
        .margin(18)
        .x_label_area_size(50)
        .y_label_area_size(65)
        .build_cartesian_2d((x0 - pad)..(x1 + pad), y0..y1)?;
    chart
        .configure_mesh()
        .x_desc(labels.x)
        .y_desc(labels.y)
        .label_style((FAMILY, 15))
        .axis_desc_style((FAMILY, 17))
        .x_label_formatter(&x_format)
        .y_label_formatter(&|y| {
            if y1 - y0 < 2.0 {
                format!("{y:.2}")
            } else {
                format!("{y:.1}")
            }
        })
        .draw()?;
    for (i, s) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(
                s.points.iter().copied(),
                color.stroke_width(2),
            ))?
            .label(s.name.as_str())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        if s.points.len() <= 25 {
            chart.draw_series(s.points.iter().map(|&p| Circle::new(p, 4, color.filled())))?;
        }
    }
    if series.len() > 1 {
        chart
            .configure_series_labels()
            .position(legend)
            .label_font((FAMILY, 15))
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()?;
    }
    root.present()?;
    Ok(())
}

/// A grid of values in [0, 1]: `values[row][column]`, rows labelled by
/// `row_labels` (drawn bottom-up), columns by `column_labels`.
pub struct Grid<'a> {
    /// Column labels (x axis).
    pub column_labels: &'a [String],
    /// Row labels (y axis).
    pub row_labels: &'a [String],
    /// Values, one row per row label.
    pub values: &'a [Vec<f64>],
}

/// Draws `grid` as a heat map (red = 0, green = 1) with each cell's value written in it.
pub fn heatmap(path: &Path, labels: &Labels, grid: &Grid) -> anyhow::Result<()> {
    register_font();
    draw_heatmap(path, labels, grid).with_context(|| format!("drawing {}", path.display()))
}

fn draw_heatmap(path: &Path, labels: &Labels, grid: &Grid) -> anyhow::Result<()> {
    let (nx, ny) = (
        grid.column_labels.len().max(1) as i32,
        grid.row_labels.len().max(1) as i32,
    );
    let (w, h) = (SIZE.0 as i32, SIZE.1 as i32);
    let (left, right, top, bottom) = (110, 30, 60, 80);
    let (cw, ch) = ((w - left - right) / nx, (h - top - bottom) / ny);
    let root = BitMapBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    let anchored = |size: u32, h: HPos, v: VPos| {
        TextStyle::from((FAMILY, size).into_font()).pos(Pos::new(h, v))
    };
    root.draw_text(
        labels.title,
        &anchored(24, HPos::Center, VPos::Center),
        (w / 2, 28),
    )?;
    for (y, row) in grid.values.iter().enumerate() {
        // Row 0 at the bottom.
        let y0 = top + (ny - 1 - y as i32) * ch;
        for (x, &v) in row.iter().enumerate() {
            let x0 = left + x as i32 * cw;
            let cell = [(x0, y0), (x0 + cw, y0 + ch)];
            root.draw(&Rectangle::new(cell, colour(v).filled()))?;
            root.draw(&Rectangle::new(cell, WHITE.stroke_width(2)))?;
            let centre = (x0 + cw / 2, y0 + ch / 2);
            root.draw_text(
                &format!("{v:.2}"),
                &anchored(18, HPos::Center, VPos::Center),
                centre,
            )?;
        }
    }
    for (x, label) in grid.column_labels.iter().enumerate() {
        let at = (left + x as i32 * cw + cw / 2, top + ny * ch + 16);
        root.draw_text(label, &anchored(15, HPos::Center, VPos::Center), at)?;
    }
    for (y, label) in grid.row_labels.iter().enumerate() {
        let at = (left - 10, top + (ny - 1 - y as i32) * ch + ch / 2);
        root.draw_text(label, &anchored(15, HPos::Right, VPos::Center), at)?;
    }
    let x_title = (left + nx * cw / 2, top + ny * ch + 48);
    root.draw_text(labels.x, &anchored(17, HPos::Center, VPos::Center), x_title)?;
    let rotated = TextStyle::from((FAMILY, 17).into_font().transform(FontTransform::Rotate270))
        .pos(Pos::new(HPos::Center, VPos::Center));
    root.draw_text(labels.y, &rotated, (28, top + ny * ch / 2))?;
    root.present()?;
    Ok(())
}

/// Red (0) through yellow (0.5) to green (1).
fn colour(v: f64) -> RGBColor {
    let v = v.clamp(0.0, 1.0);
    let lerp = |a: f64, b: f64, t: f64| (a + (b - a) * t).round() as u8;
    let (lo, mid, hi) = (
        (215.0, 48.0, 39.0),
        (255.0, 255.0, 191.0),
        (26.0, 152.0, 80.0),
    );
    let (a, b, t) = if v < 0.5 {
        (lo, mid, v * 2.0)
    } else {
        (mid, hi, v * 2.0 - 1.0)
    };
    RGBColor(lerp(a.0, b.0, t), lerp(a.1, b.1, t), lerp(a.2, b.2, t))
}
