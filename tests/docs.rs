//! The documentation a newcomer reads: README.md and docs/*.md stay short (1,800 lines in all),
//! no line outside a table is wider than 200 characters, no heading carries a date, and every
//! relative Markdown link resolves to a file inside the repository (the README links nothing
//! in `../shared`).

use std::path::{Path, PathBuf};

const LINE_BUDGET: usize = 1_800;
const MAX_WIDTH: usize = 200;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// README.md and every `docs/*.md`, with their text.
fn pages() -> Vec<(PathBuf, String)> {
    let root = root();
    let mut paths = vec![root.join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/ is readable")
        .map(|e| e.expect("a docs/ entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    paths.extend(docs);
    paths
        .into_iter()
        .map(|p| {
            let text =
                std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            (p, text)
        })
        .collect()
}

/// The lines of `text` outside fenced code blocks, with their 1-based numbers.
fn prose_lines(text: &str) -> Vec<(usize, &str)> {
    let mut fenced = false;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            out.push((i + 1, line));
        }
    }
    out
}

/// `line` without its inline code spans.
fn without_code_spans(line: &str) -> String {
    let mut out = String::new();
    let mut in_code = false;
    for c in line.chars() {
        if c == '`' {
            in_code = !in_code;
        } else if !in_code {
            out.push(c);
        }
    }
    out
}

/// The targets of the inline Markdown links and images of `line`: `[text](target)`.
fn link_targets(line: &str) -> Vec<String> {
    let line = without_code_spans(line);
    let mut out = Vec::new();
    let mut rest = line.as_str();
    while let Some(i) = rest.find("](") {
        let after = &rest[i + 2..];
        match after.find(')') {
            Some(j) => {
                let target = after[..j].split_whitespace().next().unwrap_or("");
                out.push(target.to_string());
                rest = &after[j + 1..];
            }
            None => break,
        }
    }
    out
}

fn rel(p: &Path) -> String {
    p.strip_prefix(root()).unwrap_or(p).display().to_string()
}

#[test]
fn the_docs_fit_the_line_budget() {
    let pages = pages();
    let counts: Vec<(String, usize)> = pages
        .iter()
        .map(|(p, t)| (rel(p), t.lines().count()))
        .collect();
    let total: usize = counts.iter().map(|(_, n)| n).sum();
    assert!(
        total <= LINE_BUDGET,
        "README.md and docs/*.md hold {total} lines, over the budget of {LINE_BUDGET}: {counts:?}"
    );
}

#[test]
fn no_line_outside_a_table_is_wider_than_200_characters() {
    let mut wide = Vec::new();
    for (path, text) in pages() {
        for (i, line) in text.lines().enumerate() {
            let width = line.chars().count();
            if width > MAX_WIDTH && !line.trim_start().starts_with('|') {
                wide.push(format!("{}:{}: {width} characters", rel(&path), i + 1));
            }
        }
    }
    assert!(
        wide.is_empty(),
        "lines wider than {MAX_WIDTH} characters:\n{}",
        wide.join("\n")
    );
}

#[test]
fn no_heading_carries_a_date() {
    let mut dated = Vec::new();
    for (path, text) in pages() {
        for (n, line) in prose_lines(&text) {
            if !line.starts_with('#') {
                continue;
            }
            let digits: Vec<char> = line.chars().collect();
            let has_year = digits.windows(4).any(|w| {
                w[0] == '2' && w[1] == '0' && w[2].is_ascii_digit() && w[3].is_ascii_digit()
            });
            if has_year {
                dated.push(format!("{}:{n}: {line}", rel(&path)));
            }
        }
    }
    assert!(
        dated.is_empty(),
        "headings with a date (history belongs in git and CHANGELOG.md):\n{}",
        dated.join("\n")
    );
}

#[test]
fn the_readme_links_nothing_outside_the_repository() {
    let text = std::fs::read_to_string(root().join("README.md")).expect("README.md");
    let outside: Vec<String> = prose_lines(&text)
        .into_iter()
        .flat_map(|(n, line)| link_targets(line).into_iter().map(move |t| (n, t)))
        .filter(|(_, t)| t.contains("../shared") || t.starts_with("../"))
        .map(|(n, t)| format!("README.md:{n}: {t}"))
        .collect();
    assert!(
        outside.is_empty(),
        "README links outside the checkout:\n{}",
        outside.join("\n")
    );
}

#[test]
fn every_relative_link_resolves_to_a_file_in_the_repository() {
    let root = root().canonicalize().expect("the repository root");
    let mut broken = Vec::new();
    let mut checked = 0;
    for (path, text) in pages() {
        let dir = path.parent().expect("a page's folder");
        for (n, line) in prose_lines(&text) {
            for target in link_targets(line) {
                if target.is_empty()
                    || target.starts_with('#')
                    || target.contains("://")
                    || target.starts_with("mailto:")
                {
                    continue;
                }
                let file = target.split('#').next().unwrap_or("");
                checked += 1;
                let resolved = dir.join(file);
                match resolved.canonicalize() {
                    Ok(p) if p.starts_with(&root) => {}
                    Ok(p) => broken.push(format!(
                        "{}:{n}: {target} (outside the repository: {})",
                        rel(&path),
                        p.display()
                    )),
                    Err(_) => broken.push(format!("{}:{n}: {target} (no such file)", rel(&path))),
                }
            }
        }
    }
    assert!(
        checked > 0,
        "no relative link found: the link reader is broken"
    );
    assert!(
        broken.is_empty(),
        "links that do not resolve:\n{}",
        broken.join("\n")
    );
}

#[test]
fn the_link_reader_finds_links_and_images_but_not_code() {
    assert_eq!(
        link_targets("see [a](docs/a.md) and ![f](figures/f.png)"),
        ["docs/a.md", "figures/f.png"]
    );
    assert_eq!(
        link_targets("code `x[i](j)` is not a link"),
        Vec::<String>::new()
    );
    assert_eq!(
        link_targets("[t](docs/gpu.md#throughput \"title\")"),
        ["docs/gpu.md#throughput"]
    );
    let text = "a\n```sh\n[x](nowhere.md)\n```\n[y](here.md)\n";
    let lines: Vec<_> = prose_lines(text)
        .into_iter()
        .flat_map(|(_, l)| link_targets(l))
        .collect();
    assert_eq!(lines, ["here.md"]);
}
