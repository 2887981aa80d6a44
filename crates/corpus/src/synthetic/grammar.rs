//! The probabilistic grammar of the synthetic corpus.
//!
//! ```text
//! S      -> [PP ","] Clause ["," CCONJ Clause] (. | ? | !)
//! Clause -> Subj [ADV] VERB_past [Obj] [PP] [ADV]
//!         | Subj AUX_modal [ADV] VERB_base [Obj] [PP]
//!         | Subj AUX_copula (ADJ | ADP NP)
//! Subj   -> PRON | PROPN | NP          Obj -> PRON | PROPN | NP
//! NP     -> DET_sg [ADJ [ADJ]] NOUN_sg [PP] | [DET_pl | NUM] [ADJ] NOUN_pl | NP (and | or) NP
//! PP     -> ADP (NP | PROPN | PRON)
//! ```
//!
//! Every terminal is drawn from its word class with Zipfian probabilities (rank r has weight
//! r^(-s)); the copula agrees in number with the subject and `a` becomes `an` before a vowel.

use rand::Rng;
use rand_chacha::ChaCha8Rng;

use super::words::*;
use crate::pos::{TaggedSentence, Upos};

/// Cumulative Zipf weights over the first `n` words of a list.
#[derive(Clone, Debug)]
pub(crate) struct Zipf {
    cum: Vec<f64>,
}

impl Zipf {
    /// Weights `r^(-s)` for ranks `1..=n` (`n >= 1`).
    pub(crate) fn new(n: usize, s: f64) -> Self {
        let mut total = 0.0;
        let cum = (1..=n)
            .map(|r| {
                total += (r as f64).powf(-s);
                total
            })
            .collect();
        Self { cum }
    }

    /// Number of words the table covers.
    pub(crate) fn len(&self) -> usize {
        self.cum.len()
    }

    /// A rank index in `0..n`.
    pub(crate) fn sample(&self, rng: &mut ChaCha8Rng) -> usize {
        let u = rng.random::<f64>() * self.cum[self.cum.len() - 1];
        self.cum
            .partition_point(|&c| c <= u)
            .min(self.cum.len() - 1)
    }
}

/// One Zipf table per word list, sized by the configuration.
#[derive(Clone, Debug)]
pub(crate) struct Tables {
    pub(crate) det_sg: Zipf,
    pub(crate) det_pl: Zipf,
    pub(crate) noun: Zipf,
    pub(crate) verb: Zipf,
    pub(crate) modal: Zipf,
    pub(crate) adj: Zipf,
    pub(crate) adv: Zipf,
    pub(crate) pron_subj: Zipf,
    pub(crate) pron_obj: Zipf,
    pub(crate) propn: Zipf,
    pub(crate) num: Zipf,
    pub(crate) adp: Zipf,
    pub(crate) cconj: Zipf,
    pub(crate) punct: Zipf,
}

/// Builds a sentence word by word.
pub(crate) struct Writer<'a> {
    pub(crate) rng: &'a mut ChaCha8Rng,
    pub(crate) t: &'a Tables,
    pub(crate) out: TaggedSentence,
}

impl Writer<'_> {
    fn chance(&mut self, p: f64) -> bool {
        self.rng.random::<f64>() < p
    }

    fn push(&mut self, word: &str, tag: Upos) {
        self.out.words.push(word.to_string());
        self.out.tags.push(tag);
    }

    fn pick<'w>(&mut self, table: &Zipf, list: &[&'w str]) -> &'w str {
        list[table.sample(self.rng)]
    }

    /// A whole sentence: the words with their gold tags, first letter capitalised.
    pub(crate) fn sentence(mut self) -> TaggedSentence {
        if self.chance(0.15) {
            self.pp(1);
            self.push(COMMA, Upos::Punct);
        }
        self.clause();
        if self.chance(0.2) {
            self.push(COMMA, Upos::Punct);
            let c = self.pick(&self.t.cconj, CONJUNCTIONS);
            self.push(c, Upos::Cconj);
            self.clause();
        }
        let p = self.pick(&self.t.punct, FINAL_PUNCT);
        self.push(p, Upos::Punct);
        fix_articles(&mut self.out);
        capitalise_first(&mut self.out);
        self.out
    }

    fn clause(&mut self) {
        let plural = self.subject();
        let r = self.rng.random::<f64>();
        if r < 0.55 {
            if self.chance(0.15) {
                self.adverb();
            }
            let v = VERBS[self.t.verb.sample(self.rng)].1;
            self.push(v, Upos::Verb);
            self.verb_complements(0.3);
            if self.chance(0.1) {
                self.adverb();
            }
        } else if r < 0.8 {
            let m = self.pick(&self.t.modal, MODALS);
            self.push(m, Upos::Aux);
            if self.chance(0.1) {
                self.adverb();
            }
            let v = VERBS[self.t.verb.sample(self.rng)].0;
            self.push(v, Upos::Verb);
            self.verb_complements(0.3);
        } else {
            self.push(COPULA[plural as usize], Upos::Aux);
            if self.chance(0.7) {
                self.adjective();
            } else {
                self.pp(1);
            }
        }
    }

    fn verb_complements(&mut self, p_pp: f64) {
        if self.chance(0.7) {
            self.object();
        }
        if self.chance(p_pp) {
            self.pp(1);
        }
    }

    /// Writes a subject; returns whether it is plural.
    fn subject(&mut self) -> bool {
        let r = self.rng.random::<f64>();
        if r < 0.25 {
            let (p, plural) = PRONOUNS_SUBJECT[self.t.pron_subj.sample(self.rng)];
            self.push(p, Upos::Pron);
            plural
        } else if r < 0.45 {
            self.proper_noun();
            false
        } else {
            self.np(0)
        }
    }

    fn object(&mut self) {
        let r = self.rng.random::<f64>();
        if r < 0.2 {
            let p = self.pick(&self.t.pron_obj, PRONOUNS_OBJECT);
            self.push(p, Upos::Pron);
        } else if r < 0.35 {
            self.proper_noun();
        } else {
            self.np(0);
        }
    }

    fn proper_noun(&mut self) {
        let p = self.pick(&self.t.propn, PROPER_NOUNS);
        self.push(p, Upos::Propn);
    }

    fn adjective(&mut self) {
        let a = self.pick(&self.t.adj, ADJECTIVES);
        self.push(a, Upos::Adj);
    }

    fn adverb(&mut self) {
        let a = self.pick(&self.t.adv, ADVERBS);
        self.push(a, Upos::Adv);
    }

    /// Writes a noun phrase (nesting limited by `depth`); returns whether it is plural.
    fn np(&mut self, depth: usize) -> bool {
        if depth == 0 && self.chance(0.08) {
            self.np(depth + 1);
            // `but` does not join noun phrases: use `and` instead.
            let c = match self.pick(&self.t.cconj, CONJUNCTIONS) {
                "but" => "and",
                c => c,
            };
            self.push(c, Upos::Cconj);
            self.np(depth + 1);
            return true;
        }
        let noun = NOUNS[self.t.noun.sample(self.rng)];
        if self.chance(0.3) {
            let r = self.rng.random::<f64>();
            if r < 0.6 {
                let d = self.pick(&self.t.det_pl, DET_PLURAL);
                self.push(d, Upos::Det);
            } else if r < 0.85 {
                let n = self.pick(&self.t.num, NUMERALS);
                self.push(n, Upos::Num);
            }
            if self.chance(0.3) {
                self.adjective();
            }
            self.push(noun.1, Upos::Noun);
            true
        } else {
            let d = self.pick(&self.t.det_sg, DET_SINGULAR);
            self.push(d, Upos::Det);
            if self.chance(0.3) {
                self.adjective();
                if self.chance(0.1) {
                    self.adjective();
                }
            }
            self.push(noun.0, Upos::Noun);
            if depth < 2 && self.chance(0.1) {
                self.pp(depth + 1);
            }
            false
        }
    }

    fn pp(&mut self, depth: usize) {
        let a = self.pick(&self.t.adp, ADPOSITIONS);
        self.push(a, Upos::Adp);
        let r = self.rng.random::<f64>();
        if r < 0.75 {
            self.np(depth.max(1));
        } else if r < 0.9 {
            self.proper_noun();
        } else {
            let p = self.pick(&self.t.pron_obj, PRONOUNS_OBJECT);
            self.push(p, Upos::Pron);
        }
    }
}

/// `a` -> `an` before a word that starts with a vowel letter.
fn fix_articles(s: &mut TaggedSentence) {
    for i in 0..s.words.len().saturating_sub(1) {
        if s.words[i] == "a" && s.words[i + 1].starts_with(['a', 'e', 'i', 'o', 'u']) {
            s.words[i] = "an".to_string();
        }
    }
}

fn capitalise_first(s: &mut TaggedSentence) {
    if let Some(w) = s.words.first_mut() {
        let mut chars = w.chars();
        if let Some(c) = chars.next() {
            *w = c.to_uppercase().chain(chars).collect();
        }
    }
}
