//! `wsync workspaces port-forward` and `wsync workspaces ssh` (#39): a workspace's declared
//! port as a byte stream, through the control plane (an HTTP/1.1 upgrade on the caller's
//! token) and the agent's tunnel. Nothing in the cluster is exposed, and nothing is needed
//! but the token the other commands use.

use super::client::{Error, Result, ServerArgs, client_builder, segment};
use crate::control_plane::http::workspace_streams::STREAM_PROTOCOL;
use tokio::io::{AsyncRead, AsyncWrite};

/// One stream to port `port` of workspace `name`: the upgraded connection.
async fn open(server: &ServerArgs, agent: &str, name: &str, port: u16) -> Result<reqwest::Upgraded> {
    let (builder, token) = client_builder(server)?;
    let http = builder.http1_only().build().map_err(Error::HttpClient)?;
    let path = format!("api/v1/agents/{}/workspaces/{}/ports/{port}", segment(agent), segment(name));
    let url = server.server.join(&path).map_err(|e| Error::Url {
        server: server.server.to_string(),
        path: path.clone(),
        reason: e.to_string(),
    })?;
    let mut request = http
        .get(url.clone())
        .header(reqwest::header::CONNECTION, "upgrade")
        .header(reqwest::header::UPGRADE, STREAM_PROTOCOL);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let answered = tokio::time::timeout(std::time::Duration::from_secs(30), request.send());
    let unreachable = |reason: String| Error::Unreachable { url: url.to_string(), reason };
    let response = answered
        .await
        .map_err(|_| unreachable("no answer within 30 s".into()))?
        .map_err(|e| unreachable(e.without_url().to_string()))?;
    let status = response.status();
    if status != reqwest::StatusCode::SWITCHING_PROTOCOLS {
        let body: serde_json::Value = response.json().await.unwrap_or_default();
        let message = crate::terminal::printable(body["error"].as_str().unwrap_or("no details"));
        return Err(Error::Rejected { status, message });
    }
    response.upgrade().await.map_err(|e| unreachable(e.to_string()))
}

/// Both ways until either side ends.
async fn splice(
    mut local: impl AsyncRead + AsyncWrite + Unpin,
    mut stream: impl AsyncRead + AsyncWrite + Unpin,
) -> std::io::Result<()> {
    tokio::io::copy_bidirectional(&mut local, &mut stream).await.map(|_| ())
}

/// `LOCAL:PORT` or `PORT`.
fn parse_ports(ports: &str) -> Result<(u16, u16)> {
    let refused = || Error::Usage { flag: "ports", value: ports.to_string(), form: "LOCAL:PORT or PORT" };
    let (local, remote) = ports.split_once(':').unwrap_or((ports, ports));
    let remote: u16 = remote.parse().map_err(|_| refused())?;
    let local: u16 = local.parse().map_err(|_| refused())?;
    if remote == 0 {
        return Err(refused());
    }
    Ok((local, remote))
}

/// Listen on loopback and forward each connection, until interrupted.
pub async fn port_forward(server: &ServerArgs, agent: &str, name: &str, ports: &str) -> Result<()> {
    let (local, remote) = parse_ports(ports)?;
    // One stream first, then let go: a refusal (no such workspace, an undeclared port) is
    // said now, not at the first connection.
    drop(open(server, agent, name, remote).await?);
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", local))
        .await
        .map_err(|e| Error::Io(format!("listening on 127.0.0.1:{local}: {e}")))?;
    let bound = listener.local_addr().map_err(|e| Error::Io(e.to_string()))?;
    println!("Forwarding from {bound} to port {remote} of workspace {name}");
    let (server, agent, name) = (std::sync::Arc::new(server.clone()), agent.to_string(), name.to_string());
    loop {
        let (socket, peer) = tokio::select! {
            accepted = listener.accept() => accepted.map_err(|e| Error::Io(e.to_string()))?,
            _ = tokio::signal::ctrl_c() => return Ok(()),
        };
        // Keystrokes and echoes go at once, not batched by Nagle's algorithm.
        let _ = socket.set_nodelay(true);
        // Each connection opens its own stream, in a task of its own: a slow one holds no other.
        let (server, agent, name) = (server.clone(), agent.clone(), name.clone());
        tokio::spawn(async move {
            match open(&server, &agent, &name, remote).await {
                Ok(stream) => {
                    if let Err(error) = splice(socket, stream).await {
                        eprintln!("a connection from {peer} ended: {error}");
                    }
                }
                Err(error) => eprintln!("a connection from {peer} was not forwarded: {error}"),
            }
        });
    }
}

/// Be an OpenSSH ProxyCommand: the stream on standard input and output, until the
/// workspace's end closes (standard input ending only half-closes it).
pub async fn stdio(server: &ServerArgs, agent: &str, name: &str, port: u16) -> Result<()> {
    let stream = open(server, agent, name, port).await?;
    let (mut from_workspace, mut to_workspace) = tokio::io::split(stream);
    let mut stdout = tokio::io::stdout();
    // Standard input is read on a thread of its own: tokio's would keep the runtime, and so
    // the process, waiting on a read that never returns once the workspace's end closed.
    let (chunks, mut input) = tokio::sync::mpsc::channel::<Vec<u8>>(4);
    std::thread::spawn(move || {
        let mut buffer = vec![0u8; 16 * 1024];
        loop {
            match std::io::Read::read(&mut std::io::stdin(), &mut buffer) {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    if chunks.blocking_send(buffer.get(..n).unwrap_or_default().to_vec()).is_err() {
                        return;
                    }
                }
            }
        }
    });
    let outbound = async {
        while let Some(chunk) = input.recv().await {
            tokio::io::AsyncWriteExt::write_all(&mut to_workspace, &chunk).await?;
        }
        tokio::io::AsyncWriteExt::shutdown(&mut to_workspace).await?;
        std::future::pending::<std::io::Result<()>>().await
    };
    let inbound = async {
        tokio::io::copy(&mut from_workspace, &mut stdout).await?;
        tokio::io::AsyncWriteExt::flush(&mut stdout).await
    };
    let ended = tokio::select! {
        ended = inbound => ended,
        ended = outbound => ended,
    };
    ended.map_err(|e| Error::Io(e.to_string()))
}

/// Run `ssh` with this program as its ProxyCommand, passing on the server and token flags.
pub fn ssh(
    server: &ServerArgs,
    agent: &str,
    name: &str,
    port: u16,
    user: Option<&str>,
    ssh_args: &[String],
) -> Result<()> {
    let program = std::env::current_exe().map_err(|e| Error::Io(format!("this program's path: {e}")))?;
    let mut proxy = vec![
        program.display().to_string(),
        "workspaces".into(),
        "--server".into(),
        server.server.to_string(),
        "--agent".into(),
        agent.into(),
    ];
    for (flag, file) in [("--token-file", &server.token_file), ("--admin-token-file", &server.admin_token_file)] {
        if let Some(file) = file {
            proxy.extend([flag.to_string(), file.display().to_string()]);
        }
    }
    if let Some(ca) = &server.ca_file {
        proxy.extend(["--ca-file".to_string(), ca.display().to_string()]);
    }
    proxy.extend(["ssh".into(), name.into(), "--stdio".into(), "--port".into(), port.to_string()]);
    // ssh expands `%` in a ProxyCommand: each is doubled.
    let quoted: Vec<String> = proxy.iter().map(|word| shell_quote(word).replace('%', "%%")).collect();
    let mut command = std::process::Command::new("ssh");
    command.arg("-o").arg(format!("ProxyCommand={}", quoted.join(" ")));
    // The host key is the workspace's: known under a name of its own, not the control plane's.
    command.arg("-o").arg(format!("HostKeyAlias=wsync-{agent}-{name}"));
    if let Some(user) = user {
        command.arg("-l").arg(user);
    }
    command.arg(format!("wsync-{name}")).args(ssh_args);
    let status = command.status().map_err(|e| Error::Io(format!("running ssh: {e}")))?;
    match status.code() {
        Some(0) => Ok(()),
        code => std::process::exit(code.unwrap_or(255)),
    }
}

/// One word for the shell that runs a ProxyCommand.
fn shell_quote(word: &str) -> String {
    if word.bytes().all(|b| b.is_ascii_alphanumeric() || b"/-_.:=@".contains(&b)) {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_and_quoting() {
        assert_eq!(parse_ports("2222:60022").ok(), Some((2222, 60022)));
        assert_eq!(parse_ports("8080").ok(), Some((8080, 8080)));
        assert_eq!(parse_ports("0:8080").ok(), Some((0, 8080)));
        for bad in ["", "a:1", "1:0", "70000", "1:2:3"] {
            assert!(parse_ports(bad).is_err(), "{bad}");
        }
        assert_eq!(shell_quote("/usr/bin/wsync"), "/usr/bin/wsync");
        assert_eq!(shell_quote("a b'c"), "'a b'\\''c'");
    }
}
