//! Tables: CSV quoting, Markdown layout, JSON round trip, files on disk.

use report::{Cell, ReportError, Table};

fn sample() -> Table {
    let mut t = Table::new(vec!["model".into(), "R²".into(), "n".into()])
        .with_title("Pairwise R²")
        .with_note("rows = target, columns = basis");
    t.push_row(vec!["bert".into(), 0.123456.into(), 12usize.into()]);
    t.push_row(vec![
        "a, \"quoted\"\nname".into(),
        Cell::Empty,
        (-3i64).into(),
    ]);
    t
}

#[test]
fn csv_quotes_per_rfc4180_and_keeps_full_precision() {
    let csv = sample().to_csv();
    assert_eq!(
        csv,
        "model,R²,n\r\nbert,0.123456,12\r\n\"a, \"\"quoted\"\"\nname\",,-3\r\n"
    );
}

#[test]
fn markdown_has_title_aligned_columns_and_note() {
    let md = sample().to_markdown();
    let expected = "### Pairwise R²\n\n\
| model            |     R² |   n |\n\
| ---------------- | -----: | --: |\n\
| bert             | 0.1235 |  12 |\n\
| a, \"quoted\" name |        |  -3 |\n\
\nrows = target, columns = basis\n";
    assert_eq!(md, expected, "got:\n{md}");
}

#[test]
fn markdown_precision_and_special_values() {
    let mut t = Table::new(vec!["x".into()]).with_precision(2);
    for v in [1.0 / 3.0, 1e-5, 2.5e7, f64::NAN, f64::NEG_INFINITY, 0.0] {
        t.push_row(vec![v.into()]);
    }
    let md = t.to_markdown();
    let cells: Vec<&str> = md
        .lines()
        .skip(2)
        .map(|l| l.trim_matches(|c| c == '|' || c == ' '))
        .collect();
    assert_eq!(cells, ["0.33", "1.00e-5", "2.50e7", "NaN", "-inf", "0.00"]);
}

#[test]
fn markdown_escapes_pipes() {
    let mut t = Table::new(vec!["a|b".into()]);
    t.push_row(vec!["x|y".into()]);
    let md = t.to_markdown();
    assert!(md.contains("a\\|b") && md.contains("x\\|y"), "{md}");
}

#[test]
fn json_round_trips() {
    let t = sample();
    let v = t.to_json();
    assert_eq!(v["title"], "Pairwise R²");
    assert_eq!(v["header"][1], "R²");
    assert_eq!(v["rows"][0][1], 0.123456);
    assert_eq!(v["rows"][0][2], 12);
    assert!(v["rows"][1][1].is_null());
    let text = serde_json::to_string(&v).unwrap();
    let back = Table::from_json(&serde_json::from_str(&text).unwrap()).unwrap();
    assert_eq!(back, t);
    // A real that happens to be integral stays a real.
    let mut t2 = Table::new(vec!["x".into()]);
    t2.push_row(vec![3.0.into()]);
    assert_eq!(Table::from_json(&t2.to_json()).unwrap(), t2);
}

#[test]
fn json_keeps_the_markdown_precision() {
    let mut t = Table::new(vec!["x".into()]).with_precision(2);
    t.push_row(vec![0.123456.into()]);
    let back = Table::from_json(&t.to_json()).unwrap();
    assert_eq!(back.to_markdown(), t.to_markdown());
    assert!(back.to_markdown().contains("0.12") && !back.to_markdown().contains("0.1235"));
    // A table written before the precision was saved reads with the default.
    let mut old = t.to_json();
    old.as_object_mut().unwrap().remove("precision");
    assert!(Table::from_json(&old)
        .unwrap()
        .to_markdown()
        .contains("0.1235"));
    for bad in [
        serde_json::json!(-1),
        serde_json::json!(2.5),
        serde_json::json!("2"),
    ] {
        let mut v = t.to_json();
        v["precision"] = bad.clone();
        assert!(
            matches!(Table::from_json(&v), Err(ReportError::InvalidArgument(_))),
            "precision {bad} was accepted"
        );
    }
}

#[test]
fn json_rejects_malformed_input() {
    let bad = serde_json::json!({"header": ["a"], "rows": [[{"x": 1}]]});
    assert!(matches!(
        Table::from_json(&bad),
        Err(ReportError::InvalidArgument(_))
    ));
    assert!(Table::from_json(&serde_json::json!({"rows": []})).is_err());
}

#[test]
fn cell_conversions() {
    assert_eq!(Cell::from("a"), Cell::Text("a".into()));
    assert_eq!(Cell::from(String::from("b")), Cell::Text("b".into()));
    assert_eq!(Cell::from(1.5f64), Cell::Num(1.5));
    assert_eq!(Cell::from(7i64), Cell::Int(7));
    assert_eq!(Cell::from(7usize), Cell::Int(7));
    assert_eq!(Cell::from(None::<f64>), Cell::Empty);
    assert_eq!(Cell::from(Some(2i64)), Cell::Int(2));
}

#[test]
fn write_all_creates_dir_and_three_files() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("nested/deeper");
    let t = sample();
    let paths = t.write_all(&out, "table2").unwrap();
    let names: Vec<String> = paths
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["table2.csv", "table2.md", "table2.json"]);
    assert_eq!(std::fs::read_to_string(&paths[0]).unwrap(), t.to_csv());
    assert_eq!(std::fs::read_to_string(&paths[1]).unwrap(), t.to_markdown());
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&paths[2]).unwrap()).unwrap();
    assert_eq!(Table::from_json(&json).unwrap(), t);
}

#[test]
fn ragged_rows_are_refused() {
    let mut t = Table::new(vec!["a".into(), "b".into()]);
    assert!(matches!(
        t.try_push_row(vec![1i64.into()]),
        Err(ReportError::InvalidArgument(_))
    ));
    t.push_row(vec![1i64.into()]);
    // Printing pads the short row ...
    assert_eq!(t.to_csv(), "a,b\r\n1,\r\n");
    // ... but writing files refuses it.
    let dir = tempfile::tempdir().unwrap();
    assert!(matches!(
        t.write_all(dir.path(), "t"),
        Err(ReportError::InvalidArgument(_))
    ));
    assert!(t.write_all(dir.path(), "").is_err());
}

#[test]
fn write_all_reports_io_errors_with_path() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("not_a_dir");
    std::fs::write(&file, "x").unwrap();
    let err = sample().write_all(&file.join("sub"), "t").unwrap_err();
    match err {
        ReportError::Io { path, .. } => assert!(path.starts_with(&file)),
        other => panic!("expected Io, got {other:?}"),
    }
}

#[test]
fn matrix_tables() {
    let names = vec!["a".to_string(), "b".to_string()];
    let t = Table::matrix("run", &names, &names, &[1.0, 0.5, 0.5, 1.0])
        .unwrap()
        .with_title("r");
    assert_eq!(t.header(), ["run", "a", "b"]);
    assert_eq!(t.to_csv(), "run,a,b\r\na,1,0.5\r\nb,0.5,1\r\n");
    t.validate().unwrap();
    assert!(matches!(
        Table::matrix("x", &names, &names, &[1.0]),
        Err(ReportError::InvalidArgument(_))
    ));
}

#[test]
fn a_failed_table_write_names_the_file_and_leaves_no_partial_file() {
    // A folder where the Markdown file should go: the rename over it fails (also as root).
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("t.md")).unwrap();
    let err = sample().write_all(dir.path(), "t").unwrap_err();
    assert!(err.to_string().contains("t.md"), "{err}");
    let mut left: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    // The CSV was written whole before the failure; no temporary file stays behind.
    assert_eq!(left, ["t.csv", "t.md"]);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("t.csv")).unwrap(),
        sample().to_csv()
    );
}
