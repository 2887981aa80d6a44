//! Tables 2 and 4 of the two-tower paper: several two-tower runs over seeds and styles, the
//! correlation of their preference scores over the most frequent tokens (Pearson and Spearman),
//! their correlation with frequency rank, and the controls that make the numbers meaningful
//! (the split null of each run and permutation p-values); Fig. 3 and Fig. 8.
//!
//! ```text
//! cargo run --release -p lmsplit --example preference_table -- --styles gpt,bert,elmo --seeds 0,1 \
//!     [--corpus synthetic | --corpus ../shared/data/wikitext-2/train.txt --format wikitext \
//!      --tokenizer ../shared/data/bert-base-uncased/vocab.txt] [--budget-tokens 200000] \
//!     [--top-n 5000] [--out out/preference_table]
//! ```
//!
//! Each run lives in `<out>/<style>-s<seed>/` (`run.json`, checkpoints, `logprobs.json`): a
//! killed run resumes from its checkpoints, a finished one is reused. The last line printed is a
//! JSON object with the numbers and the output paths.

mod common;

use std::path::{Path, PathBuf};
use std::time::Instant;

use candle_core::Device;
use clap::Parser;
use common::{
    correlation_table, ensure_run, hold_out, parse_list, run_scores, train_frequencies, Res,
    RunArgs,
};
use prefscore::{
    correlate_with_frequency, pairwise, sorted_profile, split_null, top_tokens, Bootstrap,
    CorrOptions, CorrelationMatrix, Method, ScoreKind,
};
use report::{Cell, PlotOptions, Series, Table};
use serde_json::json;

#[derive(Parser, Debug)]
#[command(about = "Preference-score correlations of several two-tower runs (Tables 2 and 4)")]
struct Args {
    /// Tower styles, comma-separated (gpt, bert, elmo).
    #[arg(long, default_value = "gpt,bert,elmo")]
    styles: String,
    /// Seeds, comma-separated.
    #[arg(long, default_value = "0,1")]
    seeds: String,
    /// Corpus, model and training settings of every run.
    #[command(flatten)]
    run: RunArgs,
    /// Most frequent tokens entering every correlation (capped by what was scored).
    #[arg(long, default_value_t = 5000)]
    top_n: usize,
    /// Score: arithmetic (paper eq. 4) or geometric (released code).
    #[arg(long, default_value = "arithmetic")]
    score: String,
    /// Replicates of the split null of each run.
    #[arg(long, default_value_t = 50)]
    null_replicates: usize,
    /// Bootstrap resamples and permutations of every correlation.
    #[arg(long, default_value_t = 1000)]
    resamples: usize,
    /// Output directory.
    #[arg(long, default_value = "out/preference_table")]
    out: PathBuf,
}

/// The score kind named on the command line.
fn score_kind(name: &str) -> Res<ScoreKind> {
    match name {
        "arithmetic" => Ok(ScoreKind::ArithmeticMean),
        "geometric" => Ok(ScoreKind::GeometricMean),
        k => Err(format!("unknown score {k:?} (arithmetic, geometric)").into()),
    }
}

/// Long form of a correlation matrix: every pair with its interval, p-value and token count.
fn pairs_table(m: &CorrelationMatrix, title: &str) -> Table {
    let mut t = Table::new(
        [
            "run a",
            "run b",
            "r",
            "95% low",
            "95% high",
            "permutation p",
            "tokens",
        ]
        .map(String::from)
        .to_vec(),
    )
    .with_title(title)
    .with_precision(3);
    let n = m.len();
    for i in 0..n {
        for j in i + 1..n {
            let k = i * n + j;
            t.push_row(vec![
                Cell::from(m.labels[i].as_str()),
                Cell::from(m.labels[j].as_str()),
                Cell::from(m.r[k]),
                Cell::from(m.lo[k]),
                Cell::from(m.hi[k]),
                Cell::from(m.p_value[k]),
                Cell::from(m.n[k]),
            ]);
        }
    }
    t
}

/// Mean coefficient over the pairs accepted by `keep(label a, label b)`.
fn mean_pairs(m: &CorrelationMatrix, keep: impl Fn(&str, &str) -> bool) -> Option<f64> {
    let n = m.len();
    let v: Vec<f64> = (0..n)
        .flat_map(|i| (i + 1..n).map(move |j| (i, j)))
        .filter(|&(i, j)| keep(&m.labels[i], &m.labels[j]))
        .map(|(i, j)| m.get(i, j))
        .collect();
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

/// Style part of a run label `<style>-s<seed>`.
fn style_of(label: &str) -> &str {
    label.split("-s").next().unwrap_or(label)
}

fn main() -> Res<()> {
    // candle allocates per op: keep freed buffers for reuse (see lmsplit::alloc).
    lmsplit::alloc::retain_freed_memory();
    let args = Args::parse();
    let t0 = Instant::now();
    let kind = score_kind(&args.score)?;
    let styles: Vec<String> = parse_list(&args.styles)?;
    let seeds: Vec<u64> = parse_list(&args.seeds)?;
    if styles.len() * seeds.len() < 2 {
        return Err("a correlation table needs at least two runs (styles x seeds)".into());
    }
    std::fs::create_dir_all(&args.out)?;
    let data_dir = args.out.join("data");
    let (corpus_spec, docs, tok) = args.run.load(&data_dir)?;
    let (train, valid) = hold_out(&docs);
    let vocab = tok.padded_vocab_size(8);
    let freq = train_frequencies(&tok, train, vocab)?;
    println!(
        "corpus {}: {} train / {} held-out documents, {} training tokens, vocabulary {} (padded {vocab})",
        args.run.corpus,
        train.len(),
        valid.len(),
        freq.iter().sum::<u64>(),
        tok.vocab_size()
    );

    // Runs.
    let device = Device::cuda_if_available(0)?;
    let mut runs = Vec::new();
    for style in &styles {
        for &seed in &seeds {
            let label = format!("{style}-s{seed}");
            let spec = args.run.spec(style, seed, &corpus_spec, &data_dir);
            println!("== run {label}");
            let run_t0 = Instant::now();
            let r = ensure_run(&spec, &args.out.join(&label), &tok, &docs, &device, false)?;
            let scores = run_scores(&r.logprobs, kind)?;
            let nll = r.logprobs.mean_nll();
            println!(
                "{label}: {} positions, head NLL {:?}, primary tower {} ({:.0} s)",
                r.logprobs.len(),
                nll,
                scores.towers[0],
                run_t0.elapsed().as_secs_f64()
            );
            runs.push((label, r, scores));
        }
    }

    // Tables 2 (Pearson) and 4 (Spearman).
    let opts = CorrOptions {
        bootstrap: Bootstrap {
            resamples: args.resamples,
            ..Bootstrap::default()
        },
        permutations: args.resamples,
    };
    let named: Vec<(String, &[Option<f64>])> = runs
        .iter()
        .map(|(l, _, s)| (l.clone(), &s.values[..]))
        .collect();
    let all_scores: Vec<&[Option<f64>]> = named.iter().map(|(_, s)| *s).collect();
    let common_top = top_tokens(&freq, args.top_n, &all_scores);
    println!(
        "{} of the top {} tokens are scored in every run",
        common_top.len(),
        args.top_n
    );
    let mut outputs = serde_json::Map::new();
    let mut matrices = Vec::new();
    for (method, table_no) in [(Method::Pearson, 2), (Method::Spearman, 4)] {
        let m = pairwise(&named, &freq, args.top_n, method, &opts)?;
        let title = format!(
            "Table {table_no}: {method:?} correlation of preference scores, top {} tokens",
            args.top_n
        );
        let t = correlation_table(&m, &title)?.with_note(format!(
            "{} score; tokens: the most frequent of the training text scored in both runs",
            args.score
        ));
        let long = pairs_table(&m, &format!("{title}: intervals and permutation p-values"));
        println!("{}\n{}", t.to_markdown(), long.to_markdown());
        let stem = format!("table{table_no}_{method:?}").to_lowercase();
        outputs.insert(stem.clone(), json!(t.write_all(&args.out, &stem)?));
        outputs.insert(
            format!("{stem}_pairs"),
            json!(long.write_all(&args.out, &format!("{stem}_pairs"))?),
        );
        matrices.push(m);
    }

    // Frequency rank and the split null of each run.
    let mut ctl = Table::new(
        [
            "run",
            "tokens",
            "Pearson vs frequency rank",
            "Spearman vs frequency rank",
            "split null mean",
            "split null 97.5%",
            "same-style r (other seeds)",
            "null p of same-style r",
        ]
        .map(String::from)
        .to_vec(),
    )
    .with_title("Controls: frequency and the split null (Pearson)")
    .with_note(format!(
        "split null: each run's primary-tower positions split twice at random into two pseudo-towers, {} replicates",
        args.null_replicates
    ))
    .with_precision(3);
    let pearson = &matrices[0];
    let mut controls = Vec::new();
    for (i, (label, r, scores)) in runs.iter().enumerate() {
        let fp =
            correlate_with_frequency(&scores.values, &freq, args.top_n, Method::Pearson, &opts)?;
        let fs =
            correlate_with_frequency(&scores.values, &freq, args.top_n, Method::Spearman, &opts)?;
        let lp = &r.logprobs;
        let nd = split_null(
            &lp.targets,
            &lp.logp[scores.towers[0]],
            lp.vocab_size,
            &freq,
            args.top_n,
            kind,
            Method::Pearson,
            args.null_replicates,
            i as u64,
        )?;
        let same: Vec<f64> = (0..runs.len())
            .filter(|&j| j != i && style_of(&runs[j].0) == style_of(label))
            .map(|j| pearson.get(i, j))
            .collect();
        let same_r = (!same.is_empty()).then(|| same.iter().sum::<f64>() / same.len() as f64);
        let null_p = same_r.map(|r| nd.p_value(r));
        ctl.push_row(vec![
            Cell::from(label.as_str()),
            Cell::from(fp.n),
            Cell::from(fp.r),
            Cell::from(fs.r),
            Cell::from(nd.mean),
            Cell::from(nd.q975),
            Cell::from(same_r),
            Cell::from(null_p),
        ]);
        controls.push(
            json!({"run": label, "pearson_vs_freq_rank": fp.r, "spearman_vs_freq_rank": fs.r,
            "freq_p": fp.p_value, "null_mean": nd.mean, "null_sd": nd.sd, "null_q975": nd.q975,
            "same_style_r": same_r, "null_p": null_p}),
        );
    }
    println!("{}", ctl.to_markdown());
    outputs.insert(
        "controls".into(),
        json!(ctl.write_all(&args.out, "controls")?),
    );

    // Fig. 3: every run's scores in the order of the first run's; Fig. 8: score against
    // frequency index.
    let (order, curves) = sorted_profile(&runs[0].2.values, &all_scores, &common_top)?;
    let series: Vec<Series> = runs
        .iter()
        .zip(curves)
        .map(|((l, _, _), y)| Series::from_y(l.clone(), y))
        .collect();
    let fig3 = args.out.join("fig3_sorted_scores.png");
    report::line_plot(
        &fig3,
        &series,
        &PlotOptions {
            title: format!(
                "Preference scores sorted by {} ({} tokens)",
                runs[0].0,
                order.len()
            ),
            x_label: format!("token (sorted by the score of {})", runs[0].0),
            y_label: "score s (primary − secondary)".into(),
            ..PlotOptions::default()
        },
    )?;
    let fig8 = args.out.join("fig8_score_vs_frequency.png");
    let rank: Vec<f64> = (0..common_top.len()).map(|i| i as f64).collect();
    let series: Vec<Series> = runs
        .iter()
        .map(|(l, _, s)| {
            let y = common_top
                .iter()
                .map(|&t| s.values[t as usize].unwrap_or(0.0))
                .collect();
            Series::new(l.clone(), rank.clone(), y)
        })
        .collect();
    report::scatter(
        &fig8,
        &series,
        &PlotOptions {
            title: "Preference score against frequency index".into(),
            x_label: "frequency index (0 = most frequent)".into(),
            y_label: "score s".into(),
            ..PlotOptions::default()
        },
    )?;
    outputs.insert("fig3".into(), json!(fig3));
    outputs.insert("fig8".into(), json!(fig8));
    outputs.insert(
        "runs".into(),
        json!(runs
            .iter()
            .map(|(l, _, _)| args.out.join(l))
            .collect::<Vec<_>>()),
    );

    let styles_of = |m: &CorrelationMatrix, same: bool| {
        mean_pairs(m, |a, b| (style_of(a) == style_of(b)) == same)
    };
    let summary = json!({
        "seconds": t0.elapsed().as_secs_f64(),
        "corpus": args.run.corpus, "score": args.score, "top_n": args.top_n,
        "tokens_in_every_run": common_top.len(),
        "runs": runs.iter().map(|(l, r, s)| json!({"run": l, "positions": r.logprobs.len(),
            "head_nll": r.logprobs.mean_nll(), "primary": s.towers[0], "scored": s.n_scored()})).collect::<Vec<_>>(),
        "pearson": {"labels": matrices[0].labels, "r": matrices[0].r,
                    "same_style_mean": styles_of(&matrices[0], true), "cross_style_mean": styles_of(&matrices[0], false)},
        "spearman": {"labels": matrices[1].labels, "r": matrices[1].r,
                     "same_style_mean": styles_of(&matrices[1], true), "cross_style_mean": styles_of(&matrices[1], false)},
        "controls": controls,
        "outputs": outputs,
    });
    write_summary(&args.out, &summary)?;
    println!("{summary}");
    Ok(())
}

/// Saves the JSON summary next to the tables.
fn write_summary(out: &Path, summary: &serde_json::Value) -> Res<()> {
    std::fs::write(
        out.join("summary.json"),
        serde_json::to_string_pretty(summary)?,
    )?;
    Ok(())
}
