//! Comma-separated records with a header row, as both trace formats use them. No quoting: the
//! Alibaba files have none, and Geometer's format keeps lists `|`-separated so it needs none.

use super::TraceError;
use geometer_solver::words::quoted;

pub(crate) struct Table<'a> {
    pub file: &'a str,
    header: Vec<&'a str>,
    rows: Vec<(usize, Vec<&'a str>)>,
}

/// One data row, with field access by column name that names the field in every error.
pub(crate) struct Row<'t, 'a> {
    table: &'t Table<'a>,
    pub line: usize,
    fields: &'t [&'a str],
}

impl<'a> Table<'a> {
    /// Splits `text` into header and rows; blank lines and lines starting with `#` are skipped.
    /// A UTF-8 byte-order mark, which spreadsheet programs write at the start of a CSV they save,
    /// is not part of the first column's name.
    pub(super) fn parse(file: &'a str, text: &'a str) -> Result<Self, TraceError> {
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        let mut lines = text
            .lines()
            .enumerate()
            .map(|(i, l)| (i + 1, l.trim_end_matches('\r')))
            .filter(|(_, l)| !l.trim().is_empty() && !l.starts_with('#'));
        let (_, header_line) = lines.next().ok_or_else(|| TraceError::Invalid {
            file: file.into(),
            reason: "the file is empty (no header row)".into(),
        })?;
        let header: Vec<&str> = header_line.split(',').map(str::trim).collect();
        let mut rows = Vec::new();
        for (line, text) in lines {
            let fields: Vec<&str> = text.split(',').map(str::trim).collect();
            if fields.len() != header.len() {
                return Err(TraceError::Width {
                    file: file.into(),
                    line,
                    expected: header.len(),
                    found: fields.len(),
                });
            }
            rows.push((line, fields));
        }
        Ok(Table { file, header, rows })
    }

    pub(super) fn has(&self, column: &str) -> bool {
        self.header.contains(&column)
    }

    pub(super) fn require(&self, column: &str) -> Result<(), TraceError> {
        if self.has(column) {
            Ok(())
        } else {
            Err(TraceError::MissingColumn {
                file: self.file.into(),
                column: column.into(),
                header: self.header.join(","),
            })
        }
    }

    /// Refuses a column not in `known`: a misspelt one (`arival_s`) would otherwise be read
    /// as absent, and its values silently dropped.
    pub(super) fn only(&self, known: &[&str]) -> Result<(), TraceError> {
        match self.header.iter().find(|c| !known.contains(c)) {
            Some(column) => Err(TraceError::Invalid {
                file: self.file.into(),
                reason: format!("unknown column {}; the columns are {}", quoted(column), known.join(",")),
            }),
            None => Ok(()),
        }
    }

    pub(super) fn rows(&self) -> impl Iterator<Item = Row<'_, 'a>> {
        self.rows.iter().map(move |(line, fields)| Row { table: self, line: *line, fields })
    }
}

impl<'a> Row<'_, 'a> {
    /// The field's text; empty when the column is absent or the field is blank.
    pub(super) fn get(&self, column: &str) -> &'a str {
        match self.table.header.iter().position(|h| *h == column) {
            Some(i) => self.fields[i],
            None => "",
        }
    }

    pub(super) fn error(&self, column: &str, reason: impl Into<String>) -> TraceError {
        TraceError::Field {
            file: self.table.file.into(),
            line: self.line,
            field: column.into(),
            value: self.get(column).into(),
            reason: reason.into(),
        }
    }

    /// A whole number field; blank gives `default`.
    pub(super) fn number<T: std::str::FromStr>(
        &self,
        column: &str,
        default: Option<T>,
    ) -> Result<T, TraceError> {
        let text = self.get(column);
        if text.is_empty() {
            return default.ok_or_else(|| self.error(column, "is required"));
        }
        text.parse().map_err(|_| self.error(column, "is not a whole number in range"))
    }

    /// A time in seconds; blank gives `None`.
    pub(super) fn seconds(&self, column: &str) -> Result<Option<super::Millis>, TraceError> {
        let text = self.get(column);
        if text.is_empty() {
            return Ok(None);
        }
        super::seconds_to_millis(text).map(Some).map_err(|reason| self.error(column, reason))
    }

    /// A `|`-separated list; blank (or pandas' `nan`) gives an empty list.
    pub(super) fn list(&self, column: &str) -> Vec<String> {
        let text = self.get(column);
        if text.is_empty() || text.eq_ignore_ascii_case("nan") {
            return Vec::new();
        }
        let mut items: Vec<String> =
            text.split('|').map(str::trim).filter(|s| !s.is_empty()).map(String::from).collect();
        items.dedup();
        items
    }
}
