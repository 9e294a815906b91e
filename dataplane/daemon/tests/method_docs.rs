//! docs/dataplane.md lists the daemon's methods in its "JSON-RPC methods"
//! table, readers, changers and actors apart; this fails when that list and the
//! method table (`methods::METHODS`) disagree.

use std::collections::BTreeSet;
use std::path::Path;

use rackcache_dataplane::methods::{Effect, METHODS};

/// The backquoted names of one cell.
fn names(cell: &str) -> impl Iterator<Item = String> + '_ {
    cell.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .filter(|n| n.chars().all(|c| c.is_ascii_lowercase() || c == '_'))
}

#[test]
fn the_docs_list_every_method_of_the_table_with_its_effect() {
    // This crate's own checkout (testkit's repo_root is where testkit was
    // built).
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/dataplane.md");
    let text = std::fs::read_to_string(&path).unwrap();
    let start = text
        .find("| area | reading | changing")
        .expect("the method table of docs/dataplane.md");
    let mut documented: BTreeSet<(String, Effect)> = BTreeSet::new();
    for line in text[start..].lines().skip(2) {
        if !line.starts_with('|') {
            break;
        }
        let cells: Vec<&str> = line.split('|').collect();
        assert!(cells.len() >= 5, "{line}");
        documented.extend(names(cells[2]).map(|n| (n, Effect::Reads)));
        documented.extend(names(cells[3]).map(|n| (n, Effect::Changes)));
        documented.extend(names(cells[4]).map(|n| (n, Effect::Acts)));
    }
    let table: BTreeSet<(String, Effect)> = METHODS
        .iter()
        .map(|m| (m.name.to_owned(), m.effect))
        .collect();
    let undocumented: Vec<_> = table.difference(&documented).collect();
    let unknown: Vec<_> = documented.difference(&table).collect();
    assert!(
        undocumented.is_empty() && unknown.is_empty(),
        "docs/dataplane.md's method table and methods/table.rs disagree:\n  \
         in the table, not (or with another effect) in the docs: {undocumented:?}\n  \
         in the docs, not (or with another effect) in the table: {unknown:?}"
    );
}
