//! `wsync workspaces create --devfile`, `get` and `devfile` (#40), against the real control
//! plane: the example devfile in, shown back and printed as written; a bad one refused with
//! every fault at its path, a file that is no devfile refused before it is sent.

use super::sqlite;
use super::support::ControlPlaneProcess;

const EXAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/devfile.yaml");

#[test]
fn a_workspace_from_the_example_devfile_is_created_shown_and_printed_back() {
    let dir = tempfile::tempdir().unwrap();
    let control_plane = ControlPlaneProcess::start(&sqlite(&dir), dir.path().join("cp.log"), &[]);
    control_plane.cli(&["agents", "register", "a1"]);
    control_plane.cli(&["workspaces", "--agent", "a1", "create", "web", "--devfile", EXAMPLE]);
    let shown = control_plane.cli(&["workspaces", "--agent", "a1", "get", "web"]);
    for line in [
        "COMPONENT",
        "main",
        "container",
        "localhost/workspace:3",
        "cache",
        "volume",
        "64Mi",
        "ENDPOINT",
        "web",
        "8080",
        "60022",
    ] {
        assert!(shown.contains(line), "{line:?} not in\n{shown}");
    }
    let printed = control_plane.cli(&["workspaces", "--agent", "a1", "devfile", "web"]);
    assert_eq!(printed, std::fs::read_to_string(EXAMPLE).unwrap(), "printed as written");

    // From standard input too, and a faulty one refused with each fault at its path.
    let faulty = std::fs::read_to_string(EXAMPLE).unwrap().replace("targetPort: 8080", "targetPort: 0");
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_wsync"));
    command.args(["workspaces", "--agent", "a1", "create", "bad", "--devfile", "-"]);
    command.env("WSYNC_SERVER", &control_plane.url).env("WSYNC_ADMIN_TOKEN", &control_plane.admin_token);
    command
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = command.spawn().unwrap();
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), faulty.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(said.contains("components[0].container.endpoints[0].targetPort: 0 is not a port"), "{said}");

    let binary = dir.path().join("binary.yaml");
    std::fs::write(&binary, b"schemaVersion: 2.2.0\n\xff\xfe").unwrap();
    let out =
        control_plane.try_cli(&["workspaces", "--agent", "a1", "create", "bin", "--devfile", binary.to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("not UTF-8 text (a byte at offset 21 is not)"), "{out:?}");
    let out =
        control_plane.try_cli(&["workspaces", "--agent", "a1", "create", "both", "--devfile", EXAMPLE, "--image", "x"]);
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("cannot be used with"), "{out:?}");
    let listed = control_plane.cli(&["workspaces", "--agent", "a1", "list"]);
    assert_eq!(listed.lines().count(), 2, "web alone: {listed}");
}
