use super::*;

pub fn workspace(name: &str) -> Workspace {
    Workspace {
        agent_id: "a".into(),
        name: name.into(),
        namespace: "n".into(),
        image: "i".into(),
        cpu: None,
        memory: None,
        env: Default::default(),
        desired_state: crate::protocol::DesiredState::Running,
        actual_state: crate::protocol::ActualState::Running,
        desired_state_updated_at: 1,
        actual_state_updated_at: 2,
        deployment_resource_version: Some("7".into()),
        responded_to_agent_at: None,
        force_include_all_resources: true,
        last_reported_at: Some(3),
        error: None,
        created_at: 0,
        agent_config: AgentConfig::before_settings().into(),
        owner: None,
        owner_id: None,
        last_activity_at: None,
        endpoints: Vec::new(),
        devfile: None,
        components: Vec::new(),
    }
}

/// A row as a map of column to text, integers written as text.
struct TestRow(std::collections::HashMap<&'static str, &'static str>);

impl Columns for TestRow {
    fn text(&self, column: &str) -> StoreResult<Option<String>> {
        Ok(self.0.get(column).map(|v| v.to_string()))
    }

    fn integer(&self, column: &str) -> StoreResult<Option<i64>> {
        self.0.get(column).map(|v| v.parse().map_err(|_| StoreError::Corrupt(column.into()))).transpose()
    }
}

fn row(name: &'static str, settings: Option<&'static str>) -> TestRow {
    let mut row = std::collections::HashMap::from([
        ("agent_id", "a"),
        ("name", name),
        ("namespace", "n"),
        ("image", "i"),
        ("env", "{}"),
        ("desired_state", "Running"),
        ("actual_state", "Running"),
        ("desired_state_updated_at", "1"),
        ("actual_state_updated_at", "2"),
        ("force_include_all_resources", "0"),
        ("created_at", "0"),
    ]);
    if let Some(settings) = settings {
        row.insert("agent_config", settings);
    }
    TestRow(row)
}

#[test]
fn rows_with_the_same_settings_share_one_parse_and_others_get_their_own() {
    let mut reader = WorkspaceReader::default();
    let [a, b, c, d] = [
        row("a", Some(r#"{"labels": {"team": "x"}}"#)),
        row("b", Some(r#"{"labels": {"team": "x"}}"#)),
        row("c", Some(r#"{"labels": {"team": "y"}}"#)),
        row("d", None),
    ]
    .map(|r| reader.read(&r).unwrap());
    assert!(Arc::ptr_eq(&a.agent_config, &b.agent_config), "one parse for one text");
    assert_eq!(a.agent_config.labels["team"], "x");
    assert_eq!(c.agent_config.labels["team"], "y", "a different text is parsed, not reused");
    assert_eq!(*d.agent_config, AgentConfig::before_settings(), "no settings: as before settings existed");
    assert!(reader.read(&row("e", Some("{not json"))).is_err(), "a corrupt text is refused, not reused");
}

#[test]
fn saved_rows_carry_exactly_the_saved_columns_in_order() {
    let workspace = workspace("w");
    let cells = SavedRow::of(&workspace).cells();
    let names: Vec<&str> = cells.iter().map(|(name, _)| *name).collect();
    assert_eq!(names, saved_order().collect::<Vec<_>>(), "one value per saved column, in the statement's order");
    assert_eq!(cells[6], ("force_include_all_resources", Cell::Integer(Some(1))));
    assert_eq!(serde_json::to_value(cells[0].1).unwrap(), "Running");
    assert_eq!(serde_json::to_value(Cell::Text(None)).unwrap(), serde_json::Value::Null);
}

#[test]
fn sqlite_parameters_follow_the_statement() {
    use rusqlite::ToSql;
    let workspace = workspace("w");
    let parameters = SavedRow::of(&workspace).sqlite_parameters();
    assert!(SQLITE_SAVE.contains("desired_state = ?1,") && SQLITE_SAVE.ends_with("agent_id = ?14 AND name = ?15"));
    let text = |i: usize| match parameters[i].to_sql().unwrap() {
        rusqlite::types::ToSqlOutput::Borrowed(rusqlite::types::ValueRef::Text(t)) => {
            String::from_utf8_lossy(t).to_string()
        }
        rusqlite::types::ToSqlOutput::Owned(rusqlite::types::Value::Text(t)) => t,
        other => panic!("{other:?}"),
    };
    assert_eq!(text(0), "Running");
    assert_eq!(text(13), "a");
    let save = postgres_save(1, None, &["desired_state", "last_reported_at"]);
    assert!(save.starts_with("UPDATE workspaces SET desired_state = v.desired_state, last_reported_at ="), "{save}");
    assert!(save.contains("v(agent_id TEXT, name TEXT, desired_state TEXT, last_reported_at BIGINT)"), "{save}");
}
