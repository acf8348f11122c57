//! `geometer crds`: the CRDs generated from `src/api`, as `crds/` holds them.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;

use super::output::Failure;
use geometer_api as api;

#[derive(Debug, Args)]
pub struct CrdsArgs {
    /// Write one file per CRD into this directory (as the repository's `crds/` holds them)
    /// instead of printing one YAML stream.
    #[arg(long, value_name = "DIR")]
    pub out_dir: Option<PathBuf>,
}

pub fn run(args: CrdsArgs) -> Result<(), Failure> {
    let Some(dir) = args.out_dir else {
        let text = api::crds_yaml().context("cannot render the CRDs as YAML").map_err(Failure::internal)?;
        print!("{text}");
        return Ok(());
    };
    std::fs::create_dir_all(&dir)
        .with_context(|| format!("cannot create {}", dir.display()))
        .map_err(Failure::bad_input)?;
    for crd in api::crds() {
        let path = dir.join(api::crd_file_name(&crd));
        let text = api::crd_yaml(&crd).context("cannot render a CRD as YAML").map_err(Failure::internal)?;
        std::fs::write(&path, text)
            .with_context(|| format!("cannot write {}", path.display()))
            .map_err(Failure::internal)?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}
