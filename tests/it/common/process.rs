//! The project's binaries as separate processes: started with only the variables a test names,
//! on a free port, and killed however the test ends, so a failed assertion leaves no server
//! behind.

use std::path::Path;
use std::process::{Child, Command, Stdio};

use super::TestServer;

/// A child process, killed and reaped when dropped.
pub struct Process(pub Child);

impl Process {
    /// Sends `signal` (a name `kill` knows: `TERM`, `KILL`, `STOP`, `CONT`) to the process.
    pub fn signal(&self, signal: &str) {
        let sent = Command::new("kill").arg(format!("-{signal}")).arg(self.0.id().to_string()).status().unwrap();
        assert!(sent.success(), "kill -{signal}");
    }

    /// The exit status, once the process has exited by itself.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.0.try_wait().unwrap()
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// What a started process keeps of the tests' environment: where programs are, and what a
/// failure's report or a coverage run needs; none of it changes what the process serves.
const KEPT: [&str; 3] = ["PATH", "RUST_BACKTRACE", "LLVM_PROFILE_FILE"];

/// A port nothing listens on now (the listener that found it is closed at once).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A process about to start. Its environment holds only what the test sets and what runs it
/// ([`KEPT`]): nothing inherited from the shell or CI decides the posture (`VERCEL`), the store,
/// the queue, or whose tokens are accepted.
pub struct Launch {
    command: Command,
    port: u16,
    what: String,
}

impl Launch {
    /// The local run (`src/bin/local.rs`), on a free port.
    pub fn local() -> Self {
        Self::binary(env!("CARGO_BIN_EXE_local"))
    }

    /// `program` on a free port, given as `PORT` and as `VERCEL_DEV_PORT` (which a function
    /// executable serves on).
    pub fn binary(program: &str) -> Self {
        Self::command(Command::new(program), program)
    }

    /// A prepared command (one that wraps the binary in a shell, say), on a free port.
    pub fn command(mut command: Command, what: &str) -> Self {
        let port = free_port();
        command.env_clear();
        for kept in KEPT {
            if let Some(value) = std::env::var_os(kept) {
                command.env(kept, value);
            }
        }
        command.env("PORT", port.to_string()).env("VERCEL_DEV_PORT", port.to_string());
        command.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
        Self { command, port, what: what.to_owned() }
    }

    /// On `port` instead (a process restarted where its predecessor served).
    pub fn on_port(mut self, port: u16) -> Self {
        self.port = port;
        self.command.env("PORT", port.to_string()).env("VERCEL_DEV_PORT", port.to_string());
        self
    }

    pub fn env(mut self, name: &str, value: impl AsRef<std::ffi::OsStr>) -> Self {
        self.command.env(name, value);
        self
    }

    pub fn envs(mut self, vars: &[(&str, &str)]) -> Self {
        self.command.envs(vars.iter().copied());
        self
    }

    /// Standard error to `log`, for a test that reads what the process logged.
    pub fn log_to(mut self, log: &Path) -> Self {
        self.command.stderr(std::fs::File::create(log).unwrap());
        self
    }

    /// Standard error kept for the test to read (`Process.0.stderr`).
    pub fn stderr_piped(mut self) -> Self {
        self.command.stderr(Stdio::piped());
        self
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Starts the process without waiting for it (its standard output is discarded).
    pub fn spawn(mut self) -> Process {
        Process(self.command.spawn().unwrap_or_else(|error| panic!("{} does not start: {error}", self.what)))
    }

    /// Starts the process and waits until it says on standard output that it listens.
    pub fn start(mut self) -> (Process, TestServer) {
        self.command.stdout(Stdio::piped());
        let (port, what) = (self.port, self.what.clone());
        let mut process = self.spawn();
        super::await_listening(process.0.stdout.take().unwrap(), &what);
        (process, TestServer { addr: ([127, 0, 0, 1], port).into() })
    }
}
