//! The signals that ask `agentvfs up` to stop: Ctrl-C (SIGINT), SIGTERM, and
//! SIGHUP (the terminal went away).

use std::io;

/// Stop requests, listened for from the moment they are installed, so that a
/// signal arriving during startup is not lost (nor fatal to this process,
/// which would orphan its children).
#[derive(Debug)]
pub struct StopSignals {
    #[cfg(unix)]
    signals: [tokio::signal::unix::Signal; 3],
}

impl StopSignals {
    pub fn install() -> io::Result<StopSignals> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            Ok(StopSignals {
                signals: [
                    signal(SignalKind::interrupt())?,
                    signal(SignalKind::terminate())?,
                    signal(SignalKind::hangup())?,
                ],
            })
        }
        #[cfg(not(unix))]
        Ok(StopSignals {})
    }

    /// Completes on the next stop request.
    pub async fn recv(&mut self) {
        #[cfg(unix)]
        {
            let [interrupt, terminate, hangup] = &mut self.signals;
            tokio::select! {
                _ = interrupt.recv() => {}
                _ = terminate.recv() => {}
                _ = hangup.recv() => {}
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
