//! Permission: asking Linux for the right to use tile data (placeholder).

/// The process's permission to use AMX tile data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PermissionState {
    /// Not Linux or not x86-64: there is nothing to ask.
    NotApplicable,
}
