//! What a reconcile changed, as PostgreSQL's one UPDATE takes it: only the rows it changed,
//! and in them only the columns that changed in any of them. PostgreSQL parses every value it
//! is sent, so a partial reconcile that moves two columns of 50 rows costs about half of one
//! that sends all 15 (BENCHMARKS.md). A value left out is as it was read, which the revision
//! guard or the agent's row lock keeps true until the write.

use super::error::{StoreError, StoreResult};
use super::rows::{Cell, SavedRow, rewritten_columns};
use crate::control_plane::model::Workspace;

/// The changed rows as JSON for `jsonb_to_recordset`, each with its key and `columns`.
#[derive(Debug, PartialEq)]
pub struct Changes {
    pub rows: String,
    /// The changed columns, in [`rewritten_columns`]'s order; never a key column.
    pub columns: Vec<&'static str>,
}

/// The changes between `before` and `after` (the same workspaces, before and after the
/// decision) in the rows `touched` names. None when no value changed.
pub fn changes(before: &[Workspace], after: &[Workspace], touched: &[usize]) -> StoreResult<Option<Changes>> {
    // A row's cells are the rewritten columns, then the key.
    let rewritten = rewritten_columns().count();
    let mut changed = vec![false; rewritten];
    let mut changed_rows = Vec::new();
    for &i in touched {
        let (Some(old), Some(new)) = (before.get(i), after.get(i)) else {
            return Err(StoreError::Corrupt(format!("touched row {i} is not among the loaded ones")));
        };
        let (old, new) = (SavedRow::of(old).cells(), SavedRow::of(new).cells());
        let mut row_changed = false;
        for ((flag, (_, old)), (_, new)) in changed.iter_mut().zip(&old).zip(&new) {
            if old != new {
                *flag = true;
                row_changed = true;
            }
        }
        if row_changed {
            changed_rows.push(new);
        }
    }
    if changed_rows.is_empty() {
        return Ok(None);
    }
    let sent = |j: usize| changed.get(j).is_none_or(|&flag| flag);
    let rows: Vec<ChangedRow> = changed_rows
        .iter()
        .map(|cells| ChangedRow(cells.iter().enumerate().filter(|(j, _)| sent(*j)).map(|(_, cell)| *cell).collect()))
        .collect();
    let rows = serde_json::to_string(&rows).map_err(|e| StoreError::Corrupt(e.to_string()))?;
    let columns = rewritten_columns().zip(changed).filter_map(|(c, flag)| flag.then_some(c)).collect();
    Ok(Some(Changes { rows, columns }))
}

/// One row as `jsonb_to_recordset` reads it: an object of its key and changed columns.
struct ChangedRow<'a>(Vec<(&'static str, Cell<'a>)>);

impl serde::Serialize for ChangedRow<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.0.iter().map(|(name, cell)| (name, cell)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control_plane::store::rows::tests::workspace;
    use serde_json::{Map, Value};

    #[test]
    fn only_changed_rows_and_columns_are_sent() {
        let before = vec![workspace("a"), workspace("b"), workspace("c")];
        let mut after = before.clone();
        after[0].deployment_resource_version = Some("8".into());
        after[2].last_reported_at = Some(9);
        let changes = changes(&before, &after, &[0, 1, 2]).unwrap().unwrap();
        assert_eq!(changes.columns, ["deployment_resource_version", "last_reported_at"]);
        let rows: Vec<Map<String, Value>> = serde_json::from_str(&changes.rows).unwrap();
        assert_eq!(rows.len(), 2, "the unchanged row is left out");
        assert_eq!(rows[0]["name"], "a");
        assert_eq!(rows[0]["deployment_resource_version"], "8");
        assert_eq!(rows[0]["last_reported_at"], 3, "a column another row changed carries this row's value");
        assert_eq!(rows[1]["name"], "c");
        assert_eq!(rows[1].len(), 4, "key and changed columns only: {:?}", rows[1]);
    }

    #[test]
    fn a_value_set_back_to_null_is_a_change() {
        let before = vec![workspace("a")];
        let mut after = before.clone();
        after[0].deployment_resource_version = None;
        let changes = changes(&before, &after, &[0]).unwrap().unwrap();
        let rows: Vec<Map<String, Value>> = serde_json::from_str(&changes.rows).unwrap();
        assert_eq!(rows[0]["deployment_resource_version"], Value::Null);
    }

    #[test]
    fn nothing_changed_is_none_and_a_stray_index_is_refused() {
        let before = vec![workspace("a")];
        assert_eq!(changes(&before, &before, &[0]).unwrap(), None);
        assert!(changes(&before, &before, &[1]).is_err());
    }
}
