//! One policy grammar on both sides: the admission and eviction strings of
//! test/testdata/policy-strings.tsv are valid or not for this parser
//! exactly as they are for the CRDs' CEL rules (test/api checks the same
//! file against a real apiserver), so a CachePool the apiserver takes is
//! one every cache server runs, and the reverse.

use engine::names::{parse_admission, parse_eviction};

#[test]
fn the_parser_agrees_with_the_shared_policy_table() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../test/testdata/policy-strings.tsv"
    );
    let text = std::fs::read_to_string(path).expect("the shared policy table");
    let mut checked = 0;
    let mut disagreements = Vec::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let cols: Vec<&str> = line.split('\t').collect();
        let [field, value, verdict] = cols[..] else {
            panic!("not field<TAB>value<TAB>verdict: {line:?}");
        };
        let accepted = match field {
            "admission" => parse_admission(value).is_ok(),
            "eviction" => parse_eviction(value).is_ok(),
            other => panic!("unknown field {other:?}"),
        };
        let want = match verdict {
            "accept" => true,
            "refuse" => false,
            other => panic!("unknown verdict {other:?}"),
        };
        if accepted != want {
            disagreements.push(format!("{field} {value:?}: table says {verdict}"));
        }
        checked += 1;
    }
    assert!(checked > 50, "only {checked} rows");
    assert!(disagreements.is_empty(), "{disagreements:#?}");
}
