//! Every plot writes a decodable PNG and an SVG carrying its labels; bad input is refused.
//!
//! Set `LMSPLIT_REPORT_OUT=/some/dir` to keep the images for a visual check.

use std::path::{Path, PathBuf};

use report::{
    bar_chart, category_interval_plot, heatmap, histogram_grid, interval_grid, interval_plot,
    line_plot, matrix_image, scatter, HeatmapOptions, HistogramOptions, IntervalGroup,
    IntervalPanel, IntervalPoint, MatrixOptions, PlotOptions, ReportError, Series,
};

/// Output directory: `LMSPLIT_REPORT_OUT` if set, else a temporary directory kept alive by the
/// returned guard.
fn out_dir() -> (PathBuf, Option<tempfile::TempDir>) {
    match std::env::var_os("LMSPLIT_REPORT_OUT") {
        Some(d) => (PathBuf::from(d), None),
        None => {
            let t = tempfile::tempdir().unwrap();
            (t.path().to_path_buf(), Some(t))
        }
    }
}

/// Decode a PNG; returns (width, height, RGB pixels).
fn decode_png(path: &Path) -> (u32, u32, Vec<[u8; 3]>) {
    let bytes = std::fs::read(path).unwrap();
    assert_eq!(
        &bytes[..8],
        b"\x89PNG\r\n\x1a\n",
        "{} is not a PNG",
        path.display()
    );
    let decoder = png::Decoder::new(std::io::Cursor::new(bytes));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap();
    assert_eq!(info.color_type, png::ColorType::Rgb);
    let px = buf[..info.buffer_size()]
        .chunks_exact(3)
        .map(|c| [c[0], c[1], c[2]])
        .collect();
    (info.width, info.height, px)
}

/// A PNG of plausible size with more than `min_colours` distinct colours (so something was drawn).
fn check_png(path: &Path, min_colours: usize) -> Vec<[u8; 3]> {
    let (w, h, px) = decode_png(path);
    assert!(w >= 300 && h >= 200, "{}: {w}x{h}", path.display());
    assert_eq!(px.len(), (w * h) as usize);
    let mut distinct = px.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert!(
        distinct.len() > min_colours,
        "{}: only {} colours",
        path.display(),
        distinct.len()
    );
    px
}

/// An SVG document that contains every one of `texts`.
fn check_svg(path: &Path, texts: &[&str]) {
    let s = std::fs::read_to_string(path).unwrap();
    assert!(
        s.trim_start().starts_with("<svg"),
        "{} is not SVG",
        path.display()
    );
    assert!(s.trim_end().ends_with("</svg>"));
    for t in texts {
        assert!(s.contains(t), "{} lacks {t:?}", path.display());
    }
}

fn model_names() -> Vec<String> {
    [
        "bert-base-uncased",
        "bert-base-multilingual-cased",
        "distilbert-base-uncased",
        "distilbert-base-multilingual-cased",
        "roberta-base",
        "distilroberta-base",
        "xlm-roberta-base",
        "google/electra-base-discriminator",
        "microsoft/deberta-base",
        "albert-base-v2",
        "xlnet-base-cased",
        "allenai/longformer-base-4096",
    ]
    .map(String::from)
    .to_vec()
}

#[test]
fn heatmap_png_and_svg() {
    let (dir, _guard) = out_dir();
    let names = model_names();
    let n = names.len();
    let mut v: Vec<f64> = (0..n * n)
        .map(|k| {
            if k / n == k % n {
                1.0
            } else {
                ((k * 37) % 100) as f64 / 100.0
            }
        })
        .collect();
    v[1] = f64::NAN;
    let opts = HeatmapOptions {
        title: "Pairwise R² (rows = target, columns = basis)".into(),
        x_label: "basis".into(),
        y_label: "target".into(),
        value_range: Some((0.0, 1.0)),
        annotate: true,
    };
    let png = dir.join("sub/heatmap.png");
    heatmap(&png, &v, n, n, &names, &names, &opts).unwrap();
    let px = check_png(&png, 50);
    // The NaN cell is drawn in the dedicated grey.
    assert!(px.contains(&[200, 200, 200]));
    let svg = dir.join("heatmap.svg");
    heatmap(&svg, &v, n, n, &names, &names, &HeatmapOptions::default()).unwrap();
    check_svg(&svg, &["roberta-base", "albert-base-v2", "NaN"]);
    // Non-square, no NaN, automatic range.
    let rect: Vec<f64> = (0..6).map(|k| k as f64).collect();
    let rows = vec!["a".to_string(), "b".to_string()];
    let cols = vec!["x".to_string(), "y".to_string(), "z".to_string()];
    let p = dir.join("heatmap_rect.png");
    heatmap(&p, &rect, 2, 3, &rows, &cols, &HeatmapOptions::default()).unwrap();
    check_png(&p, 10);
}

#[test]
fn heatmap_rejects_bad_input() {
    let (dir, _guard) = out_dir();
    let l2 = vec!["a".to_string(), "b".to_string()];
    let v = [0.0; 4];
    let o = HeatmapOptions::default();
    let bad =
        |r: report::Result<()>| assert!(matches!(r, Err(ReportError::InvalidArgument(_))), "{r:?}");
    bad(heatmap(&dir.join("h.jpg"), &v, 2, 2, &l2, &l2, &o));
    bad(heatmap(&dir.join("h"), &v, 2, 2, &l2, &l2, &o));
    bad(heatmap(&dir.join("h.png"), &v[..3], 2, 2, &l2, &l2, &o));
    bad(heatmap(&dir.join("h.png"), &v, 2, 2, &l2[..1], &l2, &o));
    bad(heatmap(&dir.join("h.png"), &[], 0, 0, &[], &[], &o));
    let reversed = HeatmapOptions {
        value_range: Some((1.0, 0.0)),
        ..Default::default()
    };
    bad(heatmap(&dir.join("h.png"), &v, 2, 2, &l2, &l2, &reversed));
    assert!(!dir.join("h.jpg").exists());
}

fn three_runs() -> Vec<Series> {
    // Scores of run A sorted, and runs B, C in A's order (Fig. 3).
    let n = 400;
    let a: Vec<f64> = (0..n).map(|i| -2.0 + 4.0 * i as f64 / n as f64).collect();
    let b: Vec<f64> = a
        .iter()
        .enumerate()
        .map(|(i, x)| x + ((i * 13) % 7) as f64 * 0.1)
        .collect();
    let c: Vec<f64> = a.iter().map(|x| -0.5 * x).collect();
    vec![
        Series::from_y("seed 1 (sorting run)", a),
        Series::from_y("seed 2", b),
        Series::from_y("GPT seed 1", c),
    ]
}

#[test]
fn line_and_scatter_png_and_svg() {
    let (dir, _guard) = out_dir();
    let opts = PlotOptions {
        title: "Preference scores sorted by run 1".into(),
        x_label: "token (sorted)".into(),
        y_label: "score".into(),
        ..Default::default()
    };
    let runs = three_runs();
    let png = dir.join("line.png");
    line_plot(&png, &runs, &opts).unwrap();
    check_png(&png, 20);
    let svg = dir.join("line.svg");
    line_plot(&svg, &runs, &opts).unwrap();
    check_svg(
        &svg,
        &[
            "seed 2",
            "GPT seed 1",
            "token (sorted)",
            "Preference scores",
        ],
    );

    let freq: Vec<f64> = (0..2000).map(|i| i as f64).collect();
    let score: Vec<f64> = (0..2000)
        .map(|i| ((i * 7919) % 1000) as f64 / 500.0 - 1.0)
        .collect();
    let pts = [Series::new("", freq, score)];
    let sopts = PlotOptions {
        x_label: "frequency index".into(),
        y_label: "score".into(),
        size: Some((700, 450)),
        ..Default::default()
    };
    let png = dir.join("scatter.png");
    scatter(&png, &pts, &sopts).unwrap();
    let (w, h, _) = decode_png(&png);
    assert_eq!((w, h), (700, 450));
    check_png(&png, 10);
    let svg = dir.join("scatter.svg");
    scatter(&svg, &pts, &sopts).unwrap();
    check_svg(&svg, &["frequency index", "<circle"]);
}

#[test]
fn xy_plots_reject_bad_input() {
    let (dir, _guard) = out_dir();
    let o = PlotOptions::default();
    let p = dir.join("x.png");
    assert!(matches!(
        line_plot(&p, &[], &o),
        Err(ReportError::InvalidArgument(_))
    ));
    let ragged = [Series::new("s", vec![1.0, 2.0], vec![1.0])];
    assert!(matches!(
        scatter(&p, &ragged, &o),
        Err(ReportError::InvalidArgument(_))
    ));
    let nan = [Series::new("s", vec![1.0, 2.0], vec![1.0, f64::NAN])];
    assert!(matches!(
        line_plot(&p, &nan, &o),
        Err(ReportError::InvalidArgument(_))
    ));
    let ok = [Series::from_y("s", vec![1.0, 2.0])];
    assert!(matches!(
        line_plot(&dir.join("x.pdf"), &ok, &o),
        Err(ReportError::InvalidArgument(_))
    ));
}

#[test]
fn histogram_grid_png_and_svg() {
    let (dir, _guard) = out_dir();
    let tags = ["NOUN", "VERB", "ADJ", "ADV", "ADP", "DET", "PRON"];
    let groups: Vec<(String, Vec<f64>)> = tags
        .iter()
        .enumerate()
        .map(|(g, t)| {
            let v = (0..300)
                .map(|i| ((i * 31 + g * 17) % 100) as f64 / 50.0 - 1.0 + 0.1 * g as f64)
                .collect();
            (t.to_string(), v)
        })
        .collect();
    let opts = HistogramOptions {
        title: "Preference score by POS".into(),
        x_label: "score".into(),
        bins: 20,
        mark_zero: true,
        ..Default::default()
    };
    let png = dir.join("hist.png");
    histogram_grid(&png, &groups, &opts).unwrap();
    check_png(&png, 7);
    let svg = dir.join("hist.svg");
    histogram_grid(&svg, &groups, &opts).unwrap();
    check_svg(
        &svg,
        &["NOUN (n=300)", "PRON (n=300)", "Preference score by POS"],
    );
    // Borrowed groups work too, and non-finite values are counted, not plotted.
    let borrowed: [(&str, &[f64]); 1] = [("X", &[0.0, 1.0, f64::NAN])];
    let svg = dir.join("hist_nan.svg");
    histogram_grid(&svg, &borrowed, &HistogramOptions::default()).unwrap();
    check_svg(&svg, &["X (n=2, 1 non-finite)"]);
}

#[test]
fn histogram_grid_rejects_bad_input() {
    let (dir, _guard) = out_dir();
    let o = HistogramOptions::default();
    let none: [(&str, &[f64]); 0] = [];
    assert!(matches!(
        histogram_grid(&dir.join("h.png"), &none, &o),
        Err(ReportError::InvalidArgument(_))
    ));
    let all_nan: [(&str, &[f64]); 1] = [("a", &[f64::NAN])];
    assert!(matches!(
        histogram_grid(&dir.join("h.png"), &all_nan, &o),
        Err(ReportError::InvalidArgument(_))
    ));
    let ok: [(&str, &[f64]); 1] = [("a", &[1.0])];
    assert!(matches!(
        histogram_grid(&dir.join("h.gif"), &ok, &o),
        Err(ReportError::InvalidArgument(_))
    ));
}

#[test]
fn bar_chart_png_and_svg() {
    let (dir, _guard) = out_dir();
    let labels: Vec<String> = (0..8).map(|k| k.to_string()).collect();
    let counts = [120.0, 260.0, 80.0, 25.0, 9.0, 4.0, 1.0, 0.0];
    let opts = PlotOptions {
        title: "Clusters per word".into(),
        x_label: "number of clusters".into(),
        y_label: "words".into(),
        ..Default::default()
    };
    let png = dir.join("bar.png");
    bar_chart(&png, &labels, &counts, &opts).unwrap();
    check_png(&png, 5);
    let svg = dir.join("bar.svg");
    bar_chart(&svg, &labels, &counts, &opts).unwrap();
    check_svg(&svg, &["Clusters per word", "number of clusters"]);
    // Long labels are rotated and still all present.
    let long = model_names();
    let vals: Vec<f64> = (0..long.len()).map(|i| i as f64 - 3.0).collect();
    let svg = dir.join("bar_long.svg");
    bar_chart(&svg, &long, &vals, &PlotOptions::default()).unwrap();
    check_svg(&svg, &["xlm-roberta-base", "microsoft/deberta-base"]);
    let png = dir.join("bar_long.png");
    bar_chart(&png, &long, &vals, &PlotOptions::default()).unwrap();
    check_png(&png, 5);
    // Drawn in memory, then replaced whole: drawing over a figure leaves no temporary.
    bar_chart(&png, &labels, &counts, &opts).unwrap();
    check_png(&png, 5);
    let stray: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(stray.is_empty(), "{stray:?}");
}

#[test]
fn bar_chart_rejects_bad_input() {
    let (dir, _guard) = out_dir();
    let o = PlotOptions::default();
    let p = dir.join("b.png");
    assert!(matches!(
        bar_chart(&p, &[], &[], &o),
        Err(ReportError::InvalidArgument(_))
    ));
    assert!(matches!(
        bar_chart(&p, &["a".to_string()], &[1.0, 2.0], &o),
        Err(ReportError::InvalidArgument(_))
    ));
    assert!(matches!(
        bar_chart(&p, &["a".to_string()], &[f64::INFINITY], &o),
        Err(ReportError::InvalidArgument(_))
    ));
}

#[test]
fn matrix_image_png_and_svg() {
    let (dir, _guard) = out_dir();
    // 500 words x 128 components, sparse-ish signed loadings.
    let (r, c) = (500, 128);
    let v: Vec<f64> = (0..r * c)
        .map(|k| {
            let (i, j) = (k / c, k % c);
            if (i * 7 + j * 3) % 41 == 0 {
                4.0 * if (i + j) % 2 == 0 { 1.0 } else { -1.0 }
            } else {
                ((i * 131 + j * 71) % 17) as f64 / 17.0 - 0.5
            }
        })
        .collect();
    let words: Vec<String> = (0..r).map(|i| format!("word{i}")).collect();
    let opts = MatrixOptions {
        title: "ICA loadings".into(),
        x_label: "component".into(),
        y_label: "word (by frequency)".into(),
        diverging: true,
        ..Default::default()
    };
    let png = dir.join("matrix.png");
    matrix_image(&png, &v, r, c, Some(&words), &opts).unwrap();
    check_png(&png, 20);
    // A small one as SVG (every label shown: 10 rows <= 40).
    let small: Vec<f64> = (0..30).map(|k| k as f64 - 15.0).collect();
    let labels: Vec<String> = (0..10).map(|i| format!("w{i}")).collect();
    let svg = dir.join("matrix.svg");
    matrix_image(&svg, &small, 10, 3, Some(&labels), &opts).unwrap();
    check_svg(&svg, &["w0", "w9", "ICA loadings"]);
    let svg = dir.join("matrix_nolabels.svg");
    matrix_image(&svg, &small, 10, 3, None, &MatrixOptions::default()).unwrap();
    check_svg(&svg, &["<rect"]);
}

#[test]
fn matrix_image_rejects_bad_input() {
    let (dir, _guard) = out_dir();
    let o = MatrixOptions::default();
    let p = dir.join("m.png");
    assert!(matches!(
        matrix_image(&p, &[1.0; 5], 2, 3, None, &o),
        Err(ReportError::InvalidArgument(_))
    ));
    assert!(matches!(
        matrix_image(&p, &[], 0, 3, None, &o),
        Err(ReportError::InvalidArgument(_))
    ));
    let one = vec!["a".to_string()];
    assert!(matches!(
        matrix_image(&p, &[1.0; 6], 2, 3, Some(&one), &o),
        Err(ReportError::InvalidArgument(_))
    ));
    assert!(matches!(
        matrix_image(&dir.join("m.bmp"), &[1.0; 6], 2, 3, None, &o),
        Err(ReportError::InvalidArgument(_))
    ));
}

#[test]
fn category_intervals_are_not_joined_and_have_a_zero_line() {
    let (dir, _guard) = out_dir();
    let cats: Vec<String> = ["VERB", "ADP", "ADV", "AUX", "PROPN"]
        .map(String::from)
        .to_vec();
    let run = |name: &str, shift: f64| IntervalGroup {
        name: name.into(),
        points: (0..cats.len())
            .map(|at| {
                let y = shift + if at % 2 == 0 { 0.4 } else { -0.3 };
                IntervalPoint {
                    at,
                    y,
                    interval: Some((y - 0.1, y + 0.1)),
                }
            })
            .collect(),
        ..IntervalGroup::default()
    };
    let groups = [run("gpt-s0", 0.0), run("gpt-s1", 0.1)];
    let o = PlotOptions {
        title: "POS by run".into(),
        ..PlotOptions::default()
    };
    let (joined, apart) = (dir.join("ordered.png"), dir.join("categories.png"));
    interval_plot(&joined, &cats, &groups, &o).unwrap();
    category_interval_plot(&apart, &cats, &groups, &o).unwrap();
    let count = |px: &[[u8; 3]], c: [u8; 3]| px.iter().filter(|p| **p == c).count();
    let (a, b) = (check_png(&joined, 8), check_png(&apart, 8));
    // The first group's colour (blue, or blue blended into the background): markers and error
    // bars in both, the zig-zag line through its means only when joined.
    let bluish = |px: &[[u8; 3]]| {
        px.iter()
            .filter(|p| p[2] as i32 > p[0] as i32 + 60 && p[2] > p[1])
            .count()
    };
    assert!(
        bluish(&a) > bluish(&b) + 300,
        "{} {}",
        bluish(&a),
        bluish(&b)
    );
    // The zero line: a long run of its grey on one row, only in the category plot.
    let (w, _, _) = decode_png(&apart);
    let longest_grey_row = |px: &[[u8; 3]]| {
        px.chunks(w as usize)
            .map(|row| count(row, [90, 90, 90]))
            .max()
            .unwrap()
    };
    assert!(longest_grey_row(&b) > 400, "{}", longest_grey_row(&b));
    assert!(longest_grey_row(&a) < 100, "{}", longest_grey_row(&a));
    assert!(category_interval_plot(&apart, &[], &groups, &o).is_err());
}

#[test]
fn a_group_can_share_a_colour_and_be_drawn_hollow() {
    let (dir, _guard) = out_dir();
    let pos: Vec<String> = ["1/8", "1/4", "1/2", "1"].map(String::from).to_vec();
    let group = |name: &str, shift: f64, colour, hollow| IntervalGroup {
        name: name.into(),
        points: (0..pos.len())
            .map(|at| IntervalPoint {
                at,
                y: shift + 0.1 * at as f64,
                interval: Some((shift - 0.05, shift + 0.1 * at as f64 + 0.05)),
            })
            .collect(),
        colour,
        hollow,
    };
    let o = PlotOptions::default();
    let count = |f: &Path, c: [u8; 3]| check_png(f, 8).iter().filter(|p| **p == c).count();
    let (blue, orange) = ([31, 119, 180], [255, 127, 14]);
    // Two colours by default; one when the second names the first's.
    let (own, shared) = (dir.join("own.png"), dir.join("shared.png"));
    let raw = |colour, hollow| group("gpt × gpt, raw r", 0.2, colour, hollow);
    let main = group("gpt × gpt", 0.5, None, false);
    interval_plot(&own, &pos, &[main.clone(), raw(None, false)], &o).unwrap();
    interval_plot(&shared, &pos, &[main.clone(), raw(Some(0), true)], &o).unwrap();
    assert!(count(&own, orange) > 100, "{}", count(&own, orange));
    assert_eq!(count(&shared, orange), 0);
    // One point without an interval: the centre of its marker is the colour when filled and
    // the background when hollow.
    let centre = |hollow: bool| {
        let f = dir.join(format!("one-{hollow}.png"));
        let one = IntervalGroup {
            name: "one".into(),
            points: vec![IntervalPoint {
                at: 1,
                y: 0.3,
                interval: None,
            }],
            colour: Some(0),
            hollow,
        };
        interval_plot(&f, &pos, &[one], &o).unwrap();
        let (w, _, px) = decode_png(&f);
        // The marker's bounding box in the plot (the legend's marker is right of 900 px).
        let blue_at: Vec<(usize, usize)> = px
            .iter()
            .enumerate()
            .filter(|(_, p)| **p == blue)
            .map(|(i, _)| (i % w as usize, i / w as usize))
            .filter(|(x, _)| *x < 880)
            .collect();
        assert!(!blue_at.is_empty(), "no marker drawn (hollow {hollow})");
        let xs = (
            blue_at.iter().map(|p| p.0).min(),
            blue_at.iter().map(|p| p.0).max(),
        );
        let ys = (
            blue_at.iter().map(|p| p.1).min(),
            blue_at.iter().map(|p| p.1).max(),
        );
        let (cx, cy) = (
            (xs.0.unwrap() + xs.1.unwrap()) / 2,
            (ys.0.unwrap() + ys.1.unwrap()) / 2,
        );
        px[cy * w as usize + cx]
    };
    assert_eq!(centre(false), blue);
    assert_eq!(centre(true), [255, 255, 255]);
}

#[test]
fn a_heatmap_is_wide_enough_for_its_title_and_x_description() {
    let (dir, _guard) = out_dir();
    let labels: Vec<String> = ["a", "b"].map(String::from).to_vec();
    let long = "a title long enough that two cells and a colour bar could never hold it".repeat(2);
    let draw = |title: &str, x_label: &str, name: &str| {
        let path = dir.join(name);
        let opts = HeatmapOptions {
            title: title.into(),
            x_label: x_label.into(),
            ..HeatmapOptions::default()
        };
        heatmap(&path, &[0.1, 0.2, 0.3, 0.4], 2, 2, &labels, &labels, &opts).unwrap();
        decode_png(&path).0
    };
    let short = draw("T", "x", "short.png");
    assert!(draw(&long, "x", "long_title.png") > short + 500);
    assert!(draw("T", &long, "long_x.png") > short + 400);
}

#[test]
fn interval_grid_panels_share_one_y_range_and_one_legend() {
    let (dir, _guard) = out_dir();
    let pos: Vec<String> = ["1/8", "1/4", "1/2", "1"].map(String::from).to_vec();
    let point = |at, y: f64| IntervalPoint {
        at,
        y,
        interval: Some((y - 0.02, y + 0.02)),
    };
    let panel = |title: &str, points: Vec<IntervalPoint>, colour| IntervalPanel {
        title: title.into(),
        groups: vec![IntervalGroup {
            name: "disattenuated".into(),
            points,
            colour,
            hollow: false,
        }],
    };
    // Panel 0 stays near 0; panel 1 reaches 1. On one shared range, panel 0's markers sit in
    // the lower half of its cell (on its own range they would fill it).
    let low = panel("gpt × gpt", vec![point(0, 0.0), point(3, 0.1)], Some(0));
    let high = panel("bert × bert", vec![point(1, 1.0), point(2, 0.0)], Some(1));
    let o = PlotOptions {
        title: "Agreement".into(),
        x_label: "fraction".into(),
        y_label: "r".into(),
        ..PlotOptions::default()
    };
    let f = dir.join("grid.png");
    interval_grid(&f, &pos, &[low.clone(), high.clone()], 2, &o).unwrap();
    let (w, h, px) = decode_png(&f);
    let (blue, orange, grey) = ([31, 119, 180], [255, 127, 14], [64, 64, 64]);
    let at = |c: [u8; 3]| -> Vec<(u32, u32)> {
        (px.iter().enumerate())
            .filter(|(_, p)| **p == c)
            .map(|(i, _)| (i as u32 % w, i as u32 / w))
            .collect()
    };
    let (panel_w, title_h) = (420, 44);
    let cell_mid = title_h + (h - title_h) / 2;
    let blue_at = at(blue);
    assert!(!blue_at.is_empty());
    // Blue only in the first cell, and only in its lower half.
    assert!(
        blue_at.iter().all(|&(x, _)| x < panel_w),
        "blue outside cell 0"
    );
    assert!(
        blue_at.iter().all(|&(_, y)| y > cell_mid),
        "blue reaches y {} (cell middle {cell_mid})",
        blue_at.iter().map(|p| p.1).min().unwrap()
    );
    // Orange only in the second cell; both points drawn (one high, one low).
    let orange_at = at(orange);
    assert!(orange_at
        .iter()
        .all(|&(x, _)| (panel_w..2 * panel_w).contains(&x)));
    assert!(orange_at.iter().any(|&(_, y)| y < cell_mid));
    assert!(orange_at.iter().any(|&(_, y)| y > cell_mid));
    // One legend entry for the name the panels draw in two colours: dark grey, right of the grid.
    assert!(at(grey).iter().any(|&(x, _)| x >= 2 * panel_w));
    // Where every panel draws it in one colour, the legend takes that colour.
    let same = IntervalPanel {
        groups: vec![IntervalGroup {
            colour: Some(0),
            ..high.groups[0].clone()
        }],
        ..high
    };
    let f2 = dir.join("grid-one-colour.png");
    interval_grid(&f2, &pos, &[low.clone(), same], 2, &o).unwrap();
    let (w2, _, px2) = decode_png(&f2);
    let legend_blue = (px2.iter().enumerate())
        .filter(|(i, p)| **p == blue && *i as u32 % w2 >= 2 * panel_w)
        .count();
    assert!(legend_blue > 10, "{legend_blue}");
    // One panel under a long title: the figure widens to hold it.
    let long = PlotOptions {
        title: "Agreement of the preference score during phase 1 (up to orientation)".into(),
        ..o.clone()
    };
    let f3 = dir.join("grid-one-panel.png");
    interval_grid(&f3, &pos, std::slice::from_ref(&low), 1, &long).unwrap();
    let (w3, _, _) = decode_png(&f3);
    assert!(w3 > 700, "{w3} px cannot hold the title");
    // Bad input: no panels; a panel's point past the positions (the error names the panel).
    assert!(interval_grid(&f, &pos, &[], 2, &o).is_err());
    let bad = panel("elmo × elmo", vec![point(4, 0.0)], None);
    let e = interval_grid(&f, &pos, &[low, bad], 2, &o).unwrap_err();
    assert!(e.to_string().contains("elmo × elmo"), "{e}");
}
