//! `geometer apiserver`: the in-memory Kubernetes API server on a loopback port, with a
//! kubeconfig written for it, so that a person can point kubectl at it.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;

use geometer_apiserver::ApiServer;

#[derive(Debug, clap::Args)]
#[command(about = "Run the in-memory Kubernetes API server on 127.0.0.1 and write a kubeconfig for kubectl")]
pub struct ApiserverArgs {
    /// Port on 127.0.0.1 to listen on; 0 picks a free port.
    #[arg(long, default_value_t = 0)]
    pub port: u16,

    /// Where to write the kubeconfig that points at the server.
    #[arg(long, default_value = "geometer-apiserver.kubeconfig")]
    pub kubeconfig: PathBuf,

    /// YAML manifests to load at start: files, or directories whose *.yaml/*.yml files are
    /// loaded in name order. Repeatable. CRDs load before the objects that use them.
    #[arg(long = "load", short = 'f', value_name = "PATH")]
    pub load: Vec<PathBuf>,

    /// How many changes watches can replay before a resourceVersion counts as expired (410).
    #[arg(long, default_value_t = 100_000, value_parser = crate::cli::bounds::history)]
    pub history: usize,
}

fn manifest_files(path: &Path) -> anyhow::Result<Vec<PathBuf>> {
    if path.is_dir() {
        let mut files: Vec<PathBuf> = std::fs::read_dir(path)
            .with_context(|| format!("cannot read directory {}", path.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
            .collect();
        files.sort();
        Ok(files)
    } else {
        Ok(vec![path.to_path_buf()])
    }
}

fn load(server: &ApiServer, paths: &[PathBuf]) -> anyhow::Result<usize> {
    let mut count = 0;
    for path in paths {
        for file in manifest_files(path)? {
            let text =
                std::fs::read_to_string(&file).with_context(|| format!("cannot read {}", file.display()))?;
            count +=
                server.load_yaml(&text).with_context(|| format!("cannot load {}", file.display()))?.len();
        }
    }
    Ok(count)
}

pub fn run(args: ApiserverArgs) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    runtime.block_on(async move {
        let server = ApiServer::builder().history_limit(args.history).build();
        match load(&server, &args.load) {
            Ok(0) => {}
            Ok(n) => eprintln!("loaded {n} objects"),
            Err(e) => {
                eprintln!("error: {e:#}");
                return ExitCode::from(2);
            }
        }
        let (addr, handle) = match server.serve_http(&format!("127.0.0.1:{}", args.port)).await {
            Ok(x) => x,
            Err(e) => {
                eprintln!(
                    "error: cannot listen on 127.0.0.1:{}: {e} (pick another --port, or 0 for any free port)",
                    args.port
                );
                return ExitCode::from(2);
            }
        };
        let path = std::path::absolute(&args.kubeconfig).unwrap_or(args.kubeconfig.clone());
        if let Err(e) = server.write_kubeconfig(&path) {
            eprintln!("error: cannot write the kubeconfig to {}: {e}", path.display());
            return ExitCode::from(2);
        }
        eprintln!(
            "in-memory Kubernetes API server listening on http://{addr} (Ctrl-C stops it; all state is lost)"
        );
        println!("export KUBECONFIG={}", path.display());
        let _ = tokio::signal::ctrl_c().await;
        handle.shutdown().await;
        ExitCode::SUCCESS
    })
}
