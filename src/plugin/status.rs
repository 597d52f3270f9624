//! `kubectl storageos status`.

use kube::Client;

#[derive(Debug, clap::Args)]
pub struct StatusArgs {}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("not yet")]
    NotYet,
}

pub async fn run(_client: &Client, _namespace: &str, _args: &StatusArgs) -> Result<(), Error> {
    Err(Error::NotYet)
}

/// Left-aligned columns, two spaces apart; the last column is not padded.
pub fn columns<const N: usize>(head: &[&str; N], rows: &[[String; N]]) -> String {
    let mut widths: Vec<usize> = head.iter().map(|h| h.len()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut s = String::new();
        for (i, cell) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                s.push_str(cell);
            } else {
                s.push_str(&format!("{cell:<w$}  ", w = widths[i]));
            }
        }
        s.trim_end().to_string() + "\n"
    };
    let mut out = line(head.to_vec());
    for row in rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    out
}
