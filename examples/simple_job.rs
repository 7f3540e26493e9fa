//! A Simple job embedded in a service: two instances in this process share its items over the
//! in-memory registry, then leave gracefully.
//!
//! `cargo run --example simple_job`

use std::sync::Arc;
use std::time::Duration;

use shardjob::core::{CronExpr, InstanceId, JobConfig};
use shardjob::jobs::{JobError, ShardingContext, SimpleJob};
use shardjob::mem::MemServer;
use shardjob::runtime::Scheduler;

/// Settles the payments of one region per item.
struct SettlePayments {
    instance: &'static str,
}

#[async_trait::async_trait]
impl SimpleJob for SettlePayments {
    async fn execute(&self, ctx: &ShardingContext) -> Result<(), JobError> {
        let region = ctx.sharding_parameter.as_deref().unwrap_or("?");
        println!(
            "{}: item {} ({region}) of fire {}, fencing token {}",
            self.instance,
            ctx.sharding_item,
            ctx.fire_time.format("%H:%M:%S"),
            ctx.fencing_token
        );
        // Long work should watch for cancellation (session in doubt, shutdown).
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(200)) => Ok(()),
            _ = ctx.cancel.cancelled() => Err(JobError::Cancelled),
        }
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut config =
        JobConfig::new("settle-payments", 4).with_cron(CronExpr::parse("0/2 * * * * ?")?);
    config.sharding_item_parameters =
        shardjob::core::config::parse_item_parameters("0=north,1=south,2=east,3=west")?;
    config.failover = true;

    // In production every instance is its own process and the registry is ZooKeeper or etcd;
    // here two instances share one in-memory registry.
    let server = MemServer::default();
    let mut handles = Vec::new();
    for (n, name) in ["one", "two"].into_iter().enumerate() {
        let handle = Scheduler::builder()
            .registry(Arc::new(server.connect_default()))
            .instance_id(InstanceId::new(format!("127.0.0.1@-@{}", 100 + n))?)
            .job(config.clone(), SettlePayments { instance: name })
            .build()
            .await?;
        handles.push(handle);
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    // A manual trigger with a parameter runs instance one's items at once.
    handles[0]
        .trigger("settle-payments", Some("catch-up".into()))
        .await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    for handle in &handles {
        handle.shutdown().await?;
    }
    Ok(())
}
