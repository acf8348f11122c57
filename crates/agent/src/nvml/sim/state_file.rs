//! A simulated node's GPUs kept in a file: they outlive the process that changed them (an
//! agent killed with SIGKILL and started again finds its instances, as on real hardware), and
//! two processes (the simulated kubelet and the agent) share one set of GPUs. Every use of the
//! GPUs holds an exclusive lock on `<file>.lock`, reads the file, and writes it back whole
//! (to a temporary file renamed over it, so a reader never sees half of it).

use std::fs::{File, OpenOptions};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::gpu::SavedGpu;

/// What the file holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct SavedNode {
    pub(crate) gpus: Vec<SavedGpu>,
    pub(crate) next_pid: u32,
}

#[derive(Debug)]
pub(crate) struct StateFile {
    path: PathBuf,
    lock_path: PathBuf,
}

impl StateFile {
    pub(crate) fn new(path: &Path) -> StateFile {
        let mut lock_path = path.as_os_str().to_owned();
        lock_path.push(".lock");
        StateFile { path: path.to_path_buf(), lock_path: PathBuf::from(lock_path) }
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Waits for the exclusive lock; it is released when the returned file is dropped.
    pub(crate) fn hold(&self) -> std::io::Result<File> {
        let file = OpenOptions::new().create(true).truncate(false).write(true).open(&self.lock_path)?;
        file.lock()?;
        Ok(file)
    }

    /// `None` before anything was stored.
    pub(crate) fn load(&self) -> std::io::Result<Option<SavedNode>> {
        match std::fs::read(&self.path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|e| std::io::Error::new(ErrorKind::InvalidData, e)),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    pub(crate) fn store(&self, saved: &SavedNode) -> std::io::Result<()> {
        let mut tmp = self.path.as_os_str().to_owned();
        tmp.push(".tmp");
        let bytes = serde_json::to_vec_pretty(saved).map_err(std::io::Error::other)?;
        std::fs::write(&tmp, bytes)?;
        std::fs::rename(&tmp, &self.path)
    }
}
