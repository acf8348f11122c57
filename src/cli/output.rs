//! Output formats and exit codes shared by the subcommands.

use std::process::ExitCode;

use std::io::Write;

use serde::Serialize;

/// `-o table|json|yaml`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    /// Aligned columns for people.
    #[default]
    Table,
    /// JSON for scripts.
    Json,
    /// YAML for scripts and for files to edit.
    Yaml,
}

/// Prints `value` as JSON or YAML, or the table `table` renders. JSON and YAML are written to
/// stdout as they are serialized, never held whole: a plan of a 5,000-node cluster is tens of
/// megabytes of JSON (the `plan_snapshot` benchmark's peak memory). A reader that closes the pipe
/// early (`| head`) ends the output quietly.
pub fn print<T: Serialize>(
    format: OutputFormat,
    value: &T,
    table: impl FnOnce() -> String,
) -> Result<(), Failure> {
    let mut out = std::io::BufWriter::with_capacity(1 << 16, std::io::stdout().lock());
    let written = match format {
        OutputFormat::Table => out.write_all(table().as_bytes()),
        OutputFormat::Json => serde_json::to_writer_pretty(&mut out, value)
            .map_err(std::io::Error::from)
            .and_then(|()| out.write_all(b"\n")),
        OutputFormat::Yaml => serde_saphyr::to_io_writer(&mut out, value).map_err(std::io::Error::other),
    };
    match written.and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(Failure::internal(anyhow::anyhow!("writing the output to stdout: {e}"))),
        Ok(()) => Ok(()),
    }
}

/// Left-aligned columns separated by two spaces; the last column is not padded.
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if i < widths.len() {
                widths[i] = widths[i].max(cell.chars().count());
            }
        }
    }
    let mut out = String::new();
    let header_row: Vec<String> = headers.iter().map(|h| h.to_string()).collect();
    for row in std::iter::once(&header_row).chain(rows) {
        let last = row.len().saturating_sub(1);
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            line.push_str(cell);
            if i < last {
                let pad = widths.get(i).copied().unwrap_or(0).saturating_sub(cell.chars().count()) + 2;
                line.extend(std::iter::repeat_n(' ', pad));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// A command that did not succeed, with the exit code that says why.
#[derive(Debug)]
pub struct Failure {
    pub code: u8,
    /// `None` when the command already printed its answer (e.g. why a geometry is invalid).
    pub error: Option<anyhow::Error>,
}

impl Failure {
    /// Exit 2: the input (arguments, files) is wrong.
    pub fn bad_input(error: anyhow::Error) -> Failure {
        Failure { code: 2, error: Some(error) }
    }

    /// Exit 1: the input is fine and the answer is "no".
    pub fn no(error: anyhow::Error) -> Failure {
        Failure { code: 1, error: Some(error) }
    }

    /// Exit 1 after the command printed its "no" answer itself.
    pub fn answered_no() -> Failure {
        Failure { code: 1, error: None }
    }

    /// Exit 1 for failures that are neither (cannot write output, ...).
    pub fn internal(error: anyhow::Error) -> Failure {
        Failure { code: 1, error: Some(error) }
    }
}

/// Exit code for a command's result. Errors go to standard error as one line, each cause
/// once; under `-o json` as one JSON object instead,
/// `{"error": {"message": ..., "causes": [...], "exitCode": N}}` (standard output stays
/// empty, as kubectl leaves it, so a script never mistakes an error for an answer).
pub fn finish(result: Result<(), Failure>, format: OutputFormat) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            if let Some(error) = failure.error {
                let causes = causes(&error);
                if format == OutputFormat::Json {
                    let body = serde_json::json!({"error": {
                        "message": causes.join(": "),
                        "causes": causes,
                        "exitCode": failure.code,
                    }});
                    eprintln!("{body}");
                } else {
                    eprintln!("error: {}", causes.join(": "));
                }
            }
            ExitCode::from(failure.code)
        }
    }
}

/// The error and its causes, outermost first, each said once: a cause whose words the
/// message before it already contains (a context that quoted it) is not repeated.
pub fn causes(error: &anyhow::Error) -> Vec<String> {
    said_once(error.chain().map(ToString::to_string))
}

fn said_once(texts: impl Iterator<Item = String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for text in texts {
        if !text.is_empty() && !out.iter().any(|said| said.contains(&text)) {
            out.push(text);
        }
    }
    out
}

/// A Kubernetes client error in words: the API server's own message for a refusal, and for a
/// connection that failed, where to look.
pub fn kube_error(error: &kube::Error) -> String {
    if let kube::Error::Api(status) = error {
        return format!("{} (HTTP {} {})", status.message, status.code, status.reason);
    }
    let chain = std::iter::successors(Some(error as &dyn std::error::Error), |e| e.source());
    let text = said_once(chain.map(ToString::to_string)).join(": ");
    let lower = text.to_lowercase();
    if lower.contains("connect") || lower.contains("dns error") || lower.contains("timed out") {
        format!("cannot reach the Kubernetes API server ({text}); is the cluster up, and does KUBECONFIG (or ~/.kube/config) point at it?")
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cause_the_message_already_quotes_is_said_once() {
        let inner = anyhow::anyhow!("bad value 7");
        let outer = inner.context("invalid --snapshot: bad value 7");
        assert_eq!(causes(&outer), ["invalid --snapshot: bad value 7"]);
        let chained = anyhow::anyhow!("bad value 7").context("invalid --snapshot");
        assert_eq!(causes(&chained), ["invalid --snapshot", "bad value 7"]);
    }
}
