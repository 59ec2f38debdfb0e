//! powerloss-fs: a FUSE file system for power-loss tests. It passes operations through to a
//! backing directory but keeps unsynced data and unsynced names in memory, so that a simulated
//! power loss (a command on the control socket) can drop them. See README.md.

mod control;
mod fuse;
mod model;
mod pages;

use std::ffi::OsString;
use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use fuser::{Config, MountOption, Session};

const USAGE: &str =
    "usage: powerloss-fs --backing DIR --mount MNT --control SOCKET [--seed N] [--exit-with-parent]

Mounts MNT as a view of DIR that keeps unsynced writes and name changes in memory until an
fsync makes them durable. Commands, one a line, on the Unix socket SOCKET:
  ping | stats | sync | fail-fsync N | lose-power | lose-power torn
Prints `ready` on stdout once the mount is live. SIGTERM, SIGINT and SIGHUP (and, with
--exit-with-parent, the parent's death) are a power loss: detach and exit.";

#[derive(Debug, PartialEq, Eq)]
struct Args {
    backing: PathBuf,
    mount: PathBuf,
    control: PathBuf,
    seed: Option<u64>,
    exit_with_parent: bool,
}

fn parse_args(args: impl IntoIterator<Item = OsString>) -> Result<Args, String> {
    let mut args = args.into_iter();
    let (mut backing, mut mount, mut control, mut seed) = (None, None, None, None);
    let mut exit_with_parent = false;
    while let Some(flag) = args.next() {
        let flag = flag.to_string_lossy().into_owned();
        if flag == "--help" || flag == "-h" {
            return Err(String::new());
        }
        if flag == "--exit-with-parent" {
            exit_with_parent = true;
            continue;
        }
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--backing" => backing = Some(PathBuf::from(value)),
            "--mount" => mount = Some(PathBuf::from(value)),
            "--control" => control = Some(PathBuf::from(value)),
            "--seed" => {
                let text = value.to_string_lossy();
                seed = Some(
                    text.parse::<u64>()
                        .map_err(|_| format!("--seed needs a number, not {text:?}"))?,
                );
            }
            other => return Err(format!("unknown option {other}")),
        }
    }
    Ok(Args {
        backing: backing.ok_or("--backing is required")?,
        mount: mount.ok_or("--mount is required")?,
        control: control.ok_or("--control is required")?,
        seed,
        exit_with_parent,
    })
}

fn main() {
    let args = match parse_args(std::env::args_os().skip(1)) {
        Ok(args) => args,
        Err(message) => {
            if message.is_empty() {
                println!("{USAGE}");
                return;
            }
            eprintln!("powerloss-fs: {message}\n\n{USAGE}");
            std::process::exit(2);
        }
    };
    if let Err(error) = run(args) {
        eprintln!("powerloss-fs: {error}");
        std::process::exit(1);
    }
}

fn run(args: Args) -> io::Result<()> {
    let backing = fs::canonicalize(&args.backing)?;
    let mount = fs::canonicalize(&args.mount)?;
    if mount.starts_with(&backing) || backing.starts_with(&mount) {
        return Err(io::Error::other(
            "the mount and the backing directory must not contain each other",
        ));
    }
    raise_open_file_limit();
    // Before any thread starts, so that every thread inherits the mask: the signals are taken by
    // the signal thread alone.
    let signals = block_termination_signals();
    if args.exit_with_parent {
        // SAFETY: prctl with PR_SET_PDEATHSIG takes a signal number; no pointers are involved.
        unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM as libc::c_ulong) };
        // SAFETY: getppid has no preconditions.
        if unsafe { libc::getppid() } == 1 {
            return Err(io::Error::other("the parent is gone already"));
        }
    }
    let seed = args.seed.unwrap_or_else(|| {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        now.as_nanos() as u64 ^ u64::from(std::process::id())
    });
    eprintln!("powerloss-fs: seed {seed}");
    let state = Arc::new(Mutex::new(model::State::new(backing.clone(), seed)?));

    // A socket left by an earlier run is replaced; any other file is not.
    if let Ok(meta) = fs::symlink_metadata(&args.control) {
        if meta.file_type().is_socket() {
            fs::remove_file(&args.control)?;
        }
    }
    let listener = UnixListener::bind(&args.control)?;

    let mut config = Config::default();
    config.mount_options = vec![
        MountOption::FSName("powerloss-fs".to_string()),
        MountOption::Subtype("powerloss-fs".to_string()),
        MountOption::DefaultPermissions,
    ];
    let session = Session::new(
        fuse::PowerlossFs::new(state.clone(), backing),
        &mount,
        &config,
    )?;

    let exiting = Arc::new(Mutex::new(()));
    let control = Arc::new(control::Control {
        state,
        mount,
        socket: args.control.clone(),
        exiting: exiting.clone(),
    });
    let serving = control.clone();
    std::thread::Builder::new()
        .name("control".to_string())
        .spawn(move || serving.serve(listener))?;
    std::thread::Builder::new()
        .name("signals".to_string())
        .spawn(move || {
            let mut signal = 0;
            // SAFETY: `signals` is an initialized set and `signal` a valid place for the result.
            while unsafe { libc::sigwait(&signals, &mut signal) } != 0 {}
            control.on_signal(signal)
        })?;

    println!("ready");
    io::stdout().flush()?;
    let result = session.run();
    // After a power loss the control thread ends the process, once it has replied.
    let _exiting = exiting
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let _ = fs::remove_file(&args.control);
    result
}

/// Blocks SIGTERM, SIGINT and SIGHUP in this thread (and the threads it starts later).
fn block_termination_signals() -> libc::sigset_t {
    // SAFETY: the set is initialized by sigemptyset before use; pthread_sigmask reads it.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for signal in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
            libc::sigaddset(&mut set, signal);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

/// Files keep their durable content open, so allow as many descriptors as the hard limit does.
fn raise_open_file_limit() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `limit` is a valid rlimit for getrlimit to fill and setrlimit to read.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && limit.rlim_cur < limit.rlim_max
        {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Result<Args, String> {
        parse_args(list.iter().map(OsString::from))
    }

    #[test]
    fn parses_the_options() {
        let parsed = args(&[
            "--backing",
            "b",
            "--mount",
            "m",
            "--control",
            "c",
            "--seed",
            "7",
        ])
        .unwrap();
        assert_eq!(
            parsed,
            Args {
                backing: "b".into(),
                mount: "m".into(),
                control: "c".into(),
                seed: Some(7),
                exit_with_parent: false,
            }
        );
        assert!(
            args(&[
                "--exit-with-parent",
                "--backing",
                "b",
                "--mount",
                "m",
                "--control",
                "c"
            ])
            .unwrap()
            .exit_with_parent
        );
        assert_eq!(
            args(&["--backing", "b", "--mount", "m", "--control", "c"])
                .unwrap()
                .seed,
            None
        );
        assert!(args(&["--backing", "b", "--mount", "m"]).is_err());
        assert!(args(&[
            "--backing",
            "b",
            "--mount",
            "m",
            "--control",
            "c",
            "--seed",
            "x"
        ])
        .is_err());
        assert!(args(&["--backing"]).is_err());
        assert!(args(&["--frobnicate", "1"]).is_err());
    }
}
