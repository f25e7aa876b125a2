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
    /// (x, y) points, y in [0, 1].
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
    register_font();
    draw_lines(path, labels, series).with_context(|| format!("drawing {}", path.display()))
}

fn draw_lines(path: &Path, labels: &Labels, series: &[Series]) -> anyhow::Result<()> {
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
        .build_cartesian_2d((x0 - pad)..(x1 + pad), 0f64..1.02)?;
    chart
        .configure_mesh()
        .x_desc(labels.x)
        .y_desc(labels.y)
        .label_style((FAMILY, 15))
        .axis_desc_style((FAMILY, 17))
        .x_label_formatter(&x_format)
        .y_label_formatter(&|y| format!("{y:.1}"))
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
            .position(SeriesLabelPosition::LowerRight)
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
        grid.column_labels.len() as i32,
        grid.row_labels.len() as i32,
    );
    let root = BitMapBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(labels.title, (FAMILY, 24))
        .margin(18)
        .x_label_area_size(50)
        .y_label_area_size(75)
        .build_cartesian_2d((0..nx).into_segmented(), (0..ny).into_segmented())?;
    let xf = |v: &SegmentValue<i32>| segment_label(grid.column_labels, v);
    let yf = |v: &SegmentValue<i32>| segment_label(grid.row_labels, v);
    chart
        .configure_mesh()
        .disable_mesh()
        .x_desc(labels.x)
        .y_desc(labels.y)
        .x_labels(nx as usize + 1)
        .y_labels(ny as usize + 1)
        .label_style((FAMILY, 15))
        .axis_desc_style((FAMILY, 17))
        .x_label_formatter(&xf)
        .y_label_formatter(&yf)
        .draw()?;
    let cell = |x: i32, y: i32| -> [(SegmentValue<i32>, SegmentValue<i32>); 2] {
        [
            (SegmentValue::Exact(x), SegmentValue::Exact(y)),
            (SegmentValue::Exact(x + 1), SegmentValue::Exact(y + 1)),
        ]
    };
    let centre =
        TextStyle::from((FAMILY, 18).into_font()).pos(Pos::new(HPos::Center, VPos::Center));
    for (y, row) in grid.values.iter().enumerate() {
        for (x, &v) in row.iter().enumerate() {
            let (x, y) = (x as i32, y as i32);
            chart.draw_series(std::iter::once(Rectangle::new(
                cell(x, y),
                colour(v).filled(),
            )))?;
            chart.draw_series(std::iter::once(Text::new(
                format!("{v:.2}"),
                (SegmentValue::CenterOf(x), SegmentValue::CenterOf(y)),
                centre.clone(),
            )))?;
        }
    }
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

fn segment_label(names: &[String], v: &SegmentValue<i32>) -> String {
    match v {
        SegmentValue::CenterOf(i) => names.get(*i as usize).cloned().unwrap_or_default(),
        _ => String::new(),
    }
}
