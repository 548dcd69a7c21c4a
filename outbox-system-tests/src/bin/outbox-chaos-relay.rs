//! A relay process for the chaos soak (`tests/system/chaos.rs`): the library `Relay` configured from the
//! environment, stopped gracefully by SIGTERM, meant to be SIGKILLed at random.
//!
//! ```text
//! DATABASE_URL=postgres://... AMQP_URL=amqp://... CHAOS_NAME=relay-1 CHAOS_EXCHANGE=events \
//!   [CHAOS_LEASE_MS=2000] [CHAOS_CONFIRM_TIMEOUT_MS=1000] [CHAOS_POLL_MS=200] outbox-chaos-relay
//! ```

use std::process::ExitCode;
use std::time::Duration;

use outbox_relayer::{AmqpPublisher, Relay};
use outbox_types::RetryPolicy;

#[path = "../chaos_env.rs"]
mod chaos_env;

use chaos_env::{ProcessError, millis, required};

async fn run() -> Result<(), ProcessError> {
    let name = required("CHAOS_NAME")?;
    let database = chaos_env::connect_options(&name)?;
    let publisher = AmqpPublisher::builder(required("AMQP_URL")?).connection_name(name.clone()).build_unchecked();
    // Kills and cuts make an event fail several times; short backoffs keep the drain quick, and
    // a generous limit keeps chaos from quarantining anything.
    let retry = RetryPolicy::default()
        .initial_delay(Duration::from_millis(100))
        .max_delay(Duration::from_secs(2))
        .max_attempts(1000);
    let relay = Relay::builder(database, publisher.clone())
        .relay_id(name)
        .exchange(required("CHAOS_EXCHANGE")?)
        .declare_exchange(false)
        .lease(millis("CHAOS_LEASE_MS", 2000)?)
        .confirm_timeout(millis("CHAOS_CONFIRM_TIMEOUT_MS", 1000)?)
        .poll_interval(millis("CHAOS_POLL_MS", 200)?)
        .retry_policy(retry)
        .build()?;
    relay.run(chaos_env::terminated()?).await?;
    publisher.close().await;
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    chaos_env::init_logging();
    chaos_env::exit_code(run().await)
}
