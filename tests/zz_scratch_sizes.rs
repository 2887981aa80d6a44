mod common;
use lmsplit::experiment::{Protocol, StudySpec, Workspace};
use lmsplit::towers::Style;
#[test]
fn cpu_scoring_set_sizes() {
    let shared = common::shared("data");
    let spec = StudySpec::protocol(Protocol::Cpu, &shared).unwrap();
    let dir = std::path::Path::new("/tmp/cpu-scoring-data");
    let ws = Workspace::open(&spec.corpus, dir).unwrap();
    for style in [Style::Gpt, Style::Bert, Style::Elmo] {
        let t = std::time::Instant::now();
        let set = ws.scoring_set(style, &spec.scoring).unwrap();
        eprintln!("SIZE {style} positions {} ({:.1}s)", set.id.positions, t.elapsed().as_secs_f64());
    }
}
