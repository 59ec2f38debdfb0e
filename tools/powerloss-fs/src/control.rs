//! The control socket: one command a line, one reply line for each (`ok …` or `error …`).
//!
//! ```text
//! ping              -> ok
//! stats             -> ok {"seed":…,"dirty_pages":…,…}
//! sync              -> ok                      (everything durable, like sync(1))
//! fail-fsync N      -> ok                      (the Nth file fsync from now fails with EIO)
//! lose-power        -> ok {"torn_pages_written":0,…}, then the mount is detached and the
//! lose-power torn      process exits; torn lets a seeded random subset of pages through
//! ```

use std::ffi::CString;
use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::Command as Process;
use std::sync::{Arc, Mutex};

use crate::model::State;

#[derive(Debug, PartialEq, Eq)]
pub enum Command {
    Ping,
    Stats,
    Sync,
    FailFsync(u64),
    LosePower { torn: bool },
}

pub fn parse(line: &str) -> Result<Command, String> {
    let words: Vec<&str> = line.split_whitespace().collect();
    match words.as_slice() {
        ["ping"] => Ok(Command::Ping),
        ["stats"] => Ok(Command::Stats),
        ["sync"] => Ok(Command::Sync),
        ["fail-fsync", n] => match n.parse::<u64>() {
            Ok(n) if n >= 1 => Ok(Command::FailFsync(n)),
            _ => Err(format!("fail-fsync needs a count of 1 or more, not {n:?}")),
        },
        ["lose-power"] => Ok(Command::LosePower { torn: false }),
        ["lose-power", "torn"] => Ok(Command::LosePower { torn: true }),
        _ => Err(format!("unknown command {line:?}")),
    }
}

pub struct Control {
    pub state: Arc<Mutex<State>>,
    pub mount: PathBuf,
    pub socket: PathBuf,
    /// Held from a power loss to the exit, so that the main thread (whose session ends with the
    /// detach) cannot end the process before the reply is sent.
    pub exiting: Arc<Mutex<()>>,
}

impl Control {
    /// Serves clients one after another, for the life of the process.
    pub fn serve(&self, listener: UnixListener) {
        for stream in listener.incoming() {
            match stream {
                Ok(stream) => match self.client(stream) {
                    Err(error)
                        if !matches!(
                            error.kind(),
                            io::ErrorKind::ConnectionReset | io::ErrorKind::BrokenPipe
                        ) =>
                    {
                        eprintln!("powerloss-fs: control client: {error}");
                    }
                    _ => {}
                },
                Err(error) => eprintln!("powerloss-fs: control socket: {error}"),
            }
        }
    }

    fn client(&self, stream: UnixStream) -> io::Result<()> {
        let reader = BufReader::new(stream.try_clone()?);
        let mut writer = stream;
        for line in reader.lines() {
            let line = line?;
            if line.trim().is_empty() {
                continue;
            }
            let command = match parse(&line) {
                Ok(command) => command,
                Err(message) => {
                    writeln!(writer, "error {message}")?;
                    continue;
                }
            };
            let reply = self.run(command, &mut writer)?;
            writeln!(writer, "{reply}")?;
        }
        Ok(())
    }

    fn run(&self, command: Command, writer: &mut UnixStream) -> io::Result<String> {
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if state.dead {
            return Ok("error the power is already lost".to_string());
        }
        Ok(match command {
            Command::Ping => "ok".to_string(),
            Command::Stats => format!("ok {}", state.stats_json()),
            Command::Sync => match state.sync_all() {
                Ok(()) => "ok".to_string(),
                Err(error) => format!("error {error}"),
            },
            Command::FailFsync(n) => {
                state.fail_fsync(n);
                "ok".to_string()
            }
            Command::LosePower { torn } => {
                drop(state);
                let _exiting = self
                    .exiting
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner());
                let reply = self.power_off(torn);
                writeln!(writer, "{reply}")?;
                writer.flush()?;
                self.exit(&reply);
            }
        })
    }

    /// Loses the power and detaches the mount; returns the reply. The caller then calls `exit`.
    fn power_off(&self, torn: bool) -> String {
        let report = {
            let mut state = self
                .state
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            if state.dead {
                return "error the power is already lost".to_string();
            }
            state.lose_power(torn)
        }; // requests now fail with EIO without waiting for this thread
        detach(&self.mount);
        match report {
            Ok(report) => format!(
                "ok {{\"torn\":{torn},\"torn_pages_written\":{},\"dropped_pages\":{},\"dropped_names\":{}}}",
                report.torn_pages_written, report.dropped_pages, report.dropped_names
            ),
            Err(error) => format!("error {error}"),
        }
    }

    /// Ends the process. Closing /dev/fuse makes whatever still has files open on the mount get
    /// ENOTCONN from then on.
    fn exit(&self, reply: &str) -> ! {
        let _ = std::fs::remove_file(&self.socket);
        eprintln!("powerloss-fs: power lost ({reply}); exiting");
        std::process::exit(0);
    }

    /// A termination signal (SIGTERM, SIGINT, SIGHUP, or the parent's death with
    /// --exit-with-parent) is a power loss: nothing unsynced survives, the mount is detached.
    pub fn on_signal(&self, signal: i32) -> ! {
        eprintln!("powerloss-fs: signal {signal}");
        let _exiting = self
            .exiting
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let reply = self.power_off(false);
        self.exit(&reply);
    }
}

/// Detaches the mount at once, even with files still open on it.
fn detach(mount: &Path) {
    if let Ok(path) = CString::new(mount.as_os_str().as_bytes()) {
        // SAFETY: `path` is a valid NUL-terminated string.
        if unsafe { libc::umount2(path.as_ptr(), libc::MNT_DETACH) } == 0 {
            return;
        }
    }
    match Process::new("fusermount3").arg("-uz").arg(mount).status() {
        Ok(status) if status.success() => {}
        other => eprintln!(
            "powerloss-fs: could not detach {}: {other:?}",
            mount.display()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_commands() {
        assert_eq!(parse("ping"), Ok(Command::Ping));
        assert_eq!(parse(" stats "), Ok(Command::Stats));
        assert_eq!(parse("fail-fsync 3"), Ok(Command::FailFsync(3)));
        assert_eq!(parse("lose-power"), Ok(Command::LosePower { torn: false }));
        assert_eq!(
            parse("lose-power torn"),
            Ok(Command::LosePower { torn: true })
        );
        assert!(parse("fail-fsync 0").is_err());
        assert!(parse("fail-fsync x").is_err());
        assert!(parse("lose-power softly").is_err());
        assert!(parse("reboot").is_err());
    }
}
