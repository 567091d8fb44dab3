//! `mcp-host`: list and call the tools of several MCP servers through one namespace, with
//! consent asked for every call that is not read-only.
//!
//! ```text
//! mcp-host --server docs=https://a.example/api/mcp --server jobs=http://127.0.0.1:3000/api/mcp list
//! mcp-host --server jobs=http://127.0.0.1:3000/api/mcp call jobs.submit_job '{"steps":3}' [--yes]
//!          [--header "jobs:Authorization: Bearer …"]
//! ```
//! Headers belong to one server (`--header ID:Name: value`): a token given for one server is
//! never sent to another. Without `--yes`, consent is asked on the terminal; no answer (or no
//! terminal) means no. Every call needs consent unless `--trust ID` says to believe that server's
//! annotations, and then its read-only tools do not. What a server chose to say is printed with
//! its control characters escaped.

use serde_json::{Value, json};
use std::io::{BufRead, IsTerminal, Write};
use std::sync::Arc;

use vercel_mcp::client::ClientOptions;
use vercel_mcp::client::host::{ConsentFn, Host, ServerSpec, for_terminal, json_for_terminal};

fn usage() -> ! {
    eprintln!(
        "usage: mcp-host --server ID=URL [--server ID=URL ...] [--header 'ID:Name: value' ...] [--trust ID ...] (list | call SERVER.TOOL [JSON-ARGS] [--yes])"
    );
    std::process::exit(2);
}

fn refuse(message: String) -> ! {
    eprintln!("mcp-host: {message}");
    std::process::exit(2);
}

#[tokio::main]
async fn main() {
    let mut servers: Vec<ServerSpec> = Vec::new();
    let mut headers: Vec<(String, String, String)> = Vec::new();
    let mut positional = Vec::new();
    let mut yes = false;
    let mut trusted: Vec<String> = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--server" => {
                let spec = args.next().unwrap_or_else(|| usage());
                let (id, url) = spec.split_once('=').unwrap_or_else(|| usage());
                let options = ClientOptions { name: "mcp-host".into(), ..ClientOptions::default() };
                servers.push(ServerSpec::new(id, url, options));
            }
            "--header" => {
                let header = args.next().unwrap_or_else(|| usage());
                let (id, header) = header.split_once(':').unwrap_or_else(|| usage());
                let (name, value) = header.split_once(':').unwrap_or_else(|| {
                    refuse(format!("--header takes ID:Name: value, the server id first (got a header for {id:?})"))
                });
                headers.push((id.trim().to_owned(), name.trim().to_owned(), value.trim().to_owned()));
            }
            "--trust" => trusted.push(args.next().unwrap_or_else(|| usage())),
            "--yes" => yes = true,
            "--help" | "-h" => usage(),
            _ => positional.push(arg),
        }
    }
    if servers.is_empty() || positional.is_empty() {
        usage();
    }
    for (id, name, value) in headers {
        let Some(server) = servers.iter_mut().find(|s| s.id == id) else {
            // Never guess: a header for no known server is a mistake, and it may carry a token.
            refuse(format!("--header names no --server {id:?}; headers are given per server as ID:Name: value"));
        };
        server.options = std::mem::take(&mut server.options).header(&name, &value);
    }
    for id in trusted {
        let Some(server) = servers.iter_mut().find(|s| s.id == id) else {
            refuse(format!("--trust names no --server {id:?}"));
        };
        server.trusted = true;
    }
    let host = match Host::connect(&servers).await {
        Ok(host) => host,
        Err(error) => {
            eprintln!("mcp-host: {}", for_terminal(&error.to_string()));
            std::process::exit(1);
        }
    };
    for (id, error) in host.unavailable() {
        eprintln!("mcp-host: server {id:?} is left out: {}", for_terminal(&error.to_string()));
    }
    match positional[0].as_str() {
        "list" => {
            let tools: Vec<Value> = host
                .tools()
                .iter()
                .map(|t| json!({ "name": t.name, "readOnly": t.read_only, "description": t.definition.description }))
                .collect();
            println!("{}", json_for_terminal(&tools));
        }
        "call" => {
            let name = positional.get(1).unwrap_or_else(|| usage());
            let arguments: Value = match positional.get(2) {
                Some(raw) => serde_json::from_str(raw).unwrap_or_else(|_| {
                    eprintln!("mcp-host: the arguments must be a JSON object");
                    std::process::exit(2);
                }),
                None => json!({}),
            };
            let consent: ConsentFn = Arc::new(move |name, arguments| {
                let prompt = for_terminal(&format!("Allow {name} with {arguments}? [y/N] ")).into_owned();
                Box::pin(async move {
                    if yes {
                        return Ok(true);
                    }
                    if !std::io::stdin().is_terminal() {
                        return Ok(false);
                    }
                    eprint!("{prompt}");
                    let _ = std::io::stderr().flush();
                    let mut answer = String::new();
                    std::io::stdin().lock().read_line(&mut answer).map_err(|e| e.to_string())?;
                    Ok(matches!(answer.trim(), "y" | "Y" | "yes"))
                })
            });
            match host.call(name, arguments, &consent).await {
                Ok(result) => println!("{}", json_for_terminal(&result)),
                Err(error) => {
                    eprintln!("mcp-host: {}", for_terminal(&error.to_string()));
                    std::process::exit(1);
                }
            }
        }
        _ => usage(),
    }
}
