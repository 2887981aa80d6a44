//! Sentence splitting on prose and on WikiText's tokenized style.

mod shared_data;

use corpus::{split_sentences, SentenceSplitter};

#[test]
fn prose_with_abbreviations_initials_and_decimals() {
    let text = "Mr. Smith paid $3.50 for it, e.g. a bargain. He lives in the U.S. now! \
                Did J. R. R. Tolkien write it? Yes. It was 2.5 km long... Then \"We left.\" She \
                stayed.";
    assert_eq!(
        split_sentences(text),
        [
            "Mr. Smith paid $3.50 for it, e.g. a bargain.",
            "He lives in the U.S. now!",
            "Did J. R. R. Tolkien write it?",
            "Yes.",
            "It was 2.5 km long...",
            "Then \"We left.\"",
            "She stayed.",
        ]
    );
}

#[test]
fn wikitext_tokenized_style() {
    let text = "Senjō no Valkyria 3 : <unk> Chronicles ( Japanese : 戦場のヴァルキュリア3 , lit . \
                Valkyria of the Battlefield 3 ) , commonly referred to as Valkyria Chronicles III \
                outside Japan , is a tactical role @-@ playing video game developed by Sega and \
                Media.Vision for the PlayStation Portable . Released in January 2011 in Japan , it \
                is the third game in the Valkyria series . <unk> the same fusion of tactical and \
                real @-@ time gameplay as its predecessors , the story runs 3 @.@ 5 km . It was \
                Mr . Smith 's . Dr. Who ! Why ?";
    let s = split_sentences(text);
    assert_eq!(s.len(), 6, "{s:#?}");
    assert!(s[0].starts_with("Senjō") && s[0].ends_with("PlayStation Portable ."));
    assert!(s[1].starts_with("Released") && s[1].ends_with("Valkyria series ."));
    assert!(s[2].starts_with("<unk> the same") && s[2].ends_with("3 @.@ 5 km ."));
    assert_eq!(s[3], "It was Mr . Smith 's .");
    assert_eq!(s[4], "Dr. Who !");
    assert_eq!(s[5], "Why ?");
}

#[test]
fn line_breaks_end_sentences_and_spans_are_slices() {
    let text = "  A heading without a period\nThe body . it continues in lower case .\n\n";
    let splitter = SentenceSplitter::new();
    let spans = splitter.split_spans(text);
    let s = splitter.split(text);
    assert_eq!(
        s,
        [
            "A heading without a period",
            "The body . it continues in lower case ."
        ]
    );
    for ((a, b), sent) in spans.iter().zip(&s) {
        assert_eq!(&text[*a..*b], *sent);
    }
    assert!(splitter.split("   \n ").is_empty());
}

#[test]
fn custom_abbreviations() {
    let text = "See Approx. Figures. Then Blorp. Done.";
    assert_eq!(split_sentences(text).len(), 3); // "Approx." is known.
    let s = SentenceSplitter::new()
        .with_abbreviations(["Blorp."])
        .split(text);
    assert_eq!(s, ["See Approx. Figures.", "Then Blorp. Done."]);
}

#[test]
fn wikitext_document_sentences_cover_the_text() {
    let doc = &shared_data::wikitext2_docs("valid", 1)[0];
    let s = split_sentences(&doc.text);
    let words: usize = doc.text.split_whitespace().count();
    let in_sentences: usize = s.iter().map(|x| x.split_whitespace().count()).sum();
    assert_eq!(words, in_sentences, "no word lost or duplicated");
    // WikiText sentences are short on average (tens of words), never empty.
    let mean = in_sentences as f64 / s.len() as f64;
    assert!((10.0..60.0).contains(&mean), "mean sentence length {mean}");
    assert!(s.iter().all(|x| !x.trim().is_empty()));
}
