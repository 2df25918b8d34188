//! Text for a terminal: what a peer sent made safe to print, and kubectl-style tables. Both
//! the `wsync` CLI and `kubectl wsync` print through here.

/// What a peer sent (an agent, a control plane, a hand-edited status), made safe for a
/// terminal: control characters (an escape sequence that moves the cursor or rewrites the
/// screen, say) and invisible format characters (bidirectional overrides that reorder what
/// is shown) are shown escaped.
pub fn printable(text: &str) -> String {
    let hidden = |c: char| {
        c.is_control()
            || matches!(c, '\u{00AD}' | '\u{061C}' | '\u{180E}' | '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}')
            || matches!(c, '\u{2060}'..='\u{2069}' | '\u{FEFF}' | '\u{FFF9}'..='\u{FFFB}')
    };
    text.chars().map(|c| if hidden(c) { c.escape_default().collect() } else { c.to_string() }).collect()
}

/// A kubectl-style table, one line a row, each ending in `\n`: upper-case headers, columns
/// three spaces apart, every cell made printable (a peer's text is anyone's to choose).
pub fn table_lines(header: &[&str], rows: &[Vec<String>]) -> Vec<String> {
    let rows: Vec<Vec<String>> = rows.iter().map(|row| row.iter().map(|cell| printable(cell)).collect()).collect();
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |cells: &[&str]| {
        let padded: Vec<String> = cells.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect();
        format!("{}\n", padded.join("   ").trim_end())
    };
    let mut lines = vec![line(header)];
    lines.extend(rows.iter().map(|row| line(&row.iter().map(String::as_str).collect::<Vec<_>>())));
    lines
}

/// [`table_lines`], joined.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    table_lines(header, rows).concat()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_line_up_by_characters_not_bytes() {
        let rows = vec![vec!["é".repeat(3), "x".into()], vec!["abcd".into(), "y".into()]];
        assert_eq!(table(&["NAME", "V"], &rows), "NAME   V\nééé    x\nabcd   y\n");
    }

    #[test]
    fn a_cell_cannot_drive_the_terminal() {
        let rows = vec![vec!["ws\u{1b}]0;owned\u{7}".to_string(), "a\u{202e}b".into()]];
        let out = table(&["NAME", "NOTE"], &rows);
        assert!(!out.chars().any(|c| (c.is_control() && c != '\n') || c == '\u{202e}'), "{out:?}");
    }
}
