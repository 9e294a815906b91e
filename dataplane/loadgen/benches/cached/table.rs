//! The bench's output: one compact table, each figure beside the ratio to
//! its baseline measured in the same run, and the target marked.

/// One line of the table.
#[derive(Default)]
pub struct Row {
    pub part: &'static str,
    pub case: String,
    pub iops: Option<f64>,
    pub p99_us: Option<f64>,
    /// Read hit ratio from the volume's own counters.
    pub hit: Option<f64>,
    /// What this row is judged by: text and ratio.
    pub versus: Vec<String>,
}

impl Row {
    pub fn new(part: &'static str, case: impl Into<String>) -> Self {
        Self {
            part,
            case: case.into(),
            ..Self::default()
        }
    }

    pub fn perf(mut self, iops: f64, p99_us: f64) -> Self {
        self.iops = Some(iops);
        self.p99_us = Some(p99_us);
        self
    }

    pub fn hit(mut self, h: f64) -> Self {
        self.hit = Some(h);
        self
    }

    /// `what ours/reference`.
    pub fn ratio(mut self, what: &str, ours: f64, reference: f64) -> Self {
        self.versus.push(format!("{what} {:.2}", ours / reference));
        self
    }

    /// `what ours/reference`, marked against a lower bound on the ratio.
    pub fn target(mut self, what: &str, ours: f64, reference: f64, at_least: f64) -> Self {
        let r = ours / reference;
        let mark = if r >= at_least { "ok" } else { "MISS" };
        self.versus
            .push(format!("{what} {r:.2} (target >= {at_least}: {mark})"));
        self
    }

    /// `what ours-reference` in µs, marked against an upper bound on the
    /// difference when there is one.
    pub fn diff_us(mut self, what: &str, ours: f64, reference: f64, at_most: Option<f64>) -> Self {
        let d = ours - reference;
        self.versus.push(match at_most {
            Some(m) => {
                let mark = if d <= m { "ok" } else { "MISS" };
                format!("{what} {d:+.1} us (target <= {m}: {mark})")
            }
            None => format!("{what} {d:+.1} us"),
        });
        self
    }

    pub fn note(mut self, text: impl Into<String>) -> Self {
        self.versus.push(text.into());
        self
    }
}

pub fn print(rows: &[Row], notes: &[String]) {
    println!();
    println!(
        "{:<9} {:<28} {:>9} {:>9} {:>6}  vs baseline",
        "part", "case", "IOPS", "p99 us", "hit"
    );
    let opt = |v: Option<f64>, prec: usize| v.map_or("-".to_string(), |v| format!("{v:.prec$}"));
    for r in rows {
        println!(
            "{:<9} {:<28} {:>9} {:>9} {:>6}  {}",
            r.part,
            r.case,
            opt(r.iops, 0),
            opt(r.p99_us, 1),
            opt(r.hit, 3),
            r.versus.join(", ")
        );
    }
    for n in notes {
        println!("note: {n}");
    }
}
