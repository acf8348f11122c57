//! `geometer approve PLAN` (as a kubectl plugin: `kubectl geometer approve PLAN`).

use anyhow::anyhow;
use clap::Args;

use super::output::Failure;
use geometer_controller::{approve, ApprovalError};

#[derive(Debug, Args)]
pub struct ApproveArgs {
    /// Name of the MigPlan to approve (see `kubectl get migplans`).
    pub plan: String,
}

pub fn run(args: ApproveArgs) -> Result<(), Failure> {
    let runtime = tokio::runtime::Runtime::new().map_err(|e| Failure::internal(e.into()))?;
    runtime.block_on(async {
        let client = kube::Client::try_default()
            .await
            .map_err(|e| Failure::bad_input(anyhow!("no usable kubeconfig or in-cluster config: {e}")))?;
        match approve(client, &args.plan).await {
            Ok(done) => {
                println!("{done}");
                Ok(())
            }
            Err(e @ ApprovalError::NoSuchPlan(_)) => Err(Failure::bad_input(e.into())),
            Err(e) => Err(Failure { code: e.exit_code(), error: Some(e.into()) }),
        }
    })
}
