// A `SignalScope` puts the tracked configuration back when it drops, trusting that the unit
// holds that state again (as Linux restores it when a handler returns): opened from safe code
// anywhere, a configuration loaded inside would outlive it behind the tracking's back.
#![forbid(unsafe_code)]
use amx_runtime::signal_scope;

fn main() {
    let _scope = signal_scope();
}
