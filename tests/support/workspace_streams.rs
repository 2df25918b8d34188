//! The CLI's streams to a workspace (#39), as tests drive them: `port-forward`'s local
//! address, and a `--stdio` ProxyCommand's exchange.

use std::process::Command;

/// Start `wsync workspaces port-forward …` (`command`): the process, and the local address it
/// says it forwards from.
pub fn port_forward(command: &mut Command) -> (std::process::Child, String) {
    let mut child = command.stdout(std::process::Stdio::piped()).spawn().expect("wsync port-forward");
    let mut said = String::new();
    let mut stdout = std::io::BufReader::new(child.stdout.take().expect("its stdout"));
    std::io::BufRead::read_line(&mut stdout, &mut said).expect("its first line");
    let local = said.split_whitespace().nth(2).expect("the local address").to_string();
    (child, local)
}

/// Run a ProxyCommand-like `command` (`wsync workspaces ssh … --stdio`), write `request` to it,
/// and read what it prints until the other end closes (20 s at most).
pub async fn through_stdio(mut command: Command, request: &[u8]) -> String {
    let mut child = command
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("the stdio command");
    let mut stdin = child.stdin.take().expect("its stdin");
    std::io::Write::write_all(&mut stdin, request).expect("write its input");
    // Its input stays open: it ends when the other end does.
    let waited = tokio::task::spawn_blocking(move || child.wait_with_output());
    let output = tokio::time::timeout(std::time::Duration::from_secs(20), waited)
        .await
        .expect("it ended with the other end")
        .expect("joined")
        .expect("its output");
    drop(stdin);
    String::from_utf8_lossy(&output.stdout).to_string()
}
