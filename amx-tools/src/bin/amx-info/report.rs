//! Plain-text tables and number formatting for the human report.

/// `yes` or `no`.
pub fn yes_no(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

/// A number with a precision that suits its size (`-` when absent or not finite).
pub fn num(x: Option<f64>) -> String {
    match x {
        Some(x) if x.is_finite() => {
            let a = x.abs();
            if a >= 1000.0 {
                format!("{x:.0}")
            } else if a >= 100.0 {
                format!("{x:.1}")
            } else if a >= 1.0 {
                format!("{x:.2}")
            } else {
                format!("{x:.3}")
            }
        }
        _ => "-".to_owned(),
    }
}

/// A table of text cells, printed with aligned columns. Columns whose header starts with `>` are
/// right-aligned (numbers); the `>` is not printed.
pub struct Table {
    headers: Vec<String>,
    right: Vec<bool>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(headers: &[&str]) -> Table {
        Table {
            headers: headers
                .iter()
                .map(|h| h.trim_start_matches('>').to_owned())
                .collect(),
            right: headers.iter().map(|h| h.starts_with('>')).collect(),
            rows: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// The table, each line prefixed with `indent`; the header line (and a rule under it) only
    /// when `header` is set. The last column is never padded.
    pub fn render(&self, indent: &str, header: bool) -> String {
        let n = self.headers.len();
        let mut width = vec![0usize; n];
        let all = std::iter::once(&self.headers)
            .filter(|_| header)
            .chain(self.rows.iter());
        for row in all {
            for (w, cell) in width.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let line = |row: &[String]| {
            let mut s = String::from(indent);
            for (i, cell) in row.iter().enumerate().take(n) {
                let pad = width[i].saturating_sub(cell.chars().count());
                let last = i + 1 == n;
                if self.right[i] {
                    s.extend(std::iter::repeat_n(' ', pad));
                    s += cell;
                } else {
                    s += cell;
                    if !last {
                        s.extend(std::iter::repeat_n(' ', pad));
                    }
                }
                if !last {
                    s += "  ";
                }
            }
            s.trim_end().to_owned() + "\n"
        };
        let mut out = String::new();
        if header {
            out += &line(&self.headers);
            let total: usize = width.iter().sum::<usize>() + 2 * n.saturating_sub(1);
            out += indent;
            out.extend(std::iter::repeat_n('-', total.min(120)));
            out.push('\n');
        }
        for row in &self.rows {
            out += &line(row);
        }
        out
    }
}
