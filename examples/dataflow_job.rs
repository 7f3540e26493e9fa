//! A streaming Dataflow job: each item fetches and processes batches until its share of the
//! work is done.
//!
//! `cargo run --example dataflow_job`

use std::sync::{Arc, Mutex};
use std::time::Duration;

use shardjob::core::{CronExpr, JobConfig};
use shardjob::jobs::{Dataflow, DataflowJob, JobError, ShardingContext};
use shardjob::mem::MemServer;
use shardjob::runtime::Scheduler;

/// Orders 0..100 waiting to be shipped; item `i` ships the orders with `id % total == i`.
struct ShipOrders {
    pending: Arc<Mutex<Vec<u32>>>,
}

#[async_trait::async_trait]
impl DataflowJob for ShipOrders {
    type Data = u32;

    async fn fetch_data(&self, ctx: &ShardingContext) -> Result<Vec<u32>, JobError> {
        let pending = self.pending.lock().map_err(JobError::failed)?;
        Ok(pending
            .iter()
            .copied()
            .filter(|id| id % ctx.sharding_total_count == ctx.sharding_item)
            .take(10)
            .collect())
    }

    async fn process_data(&self, ctx: &ShardingContext, data: Vec<u32>) -> Result<(), JobError> {
        println!("item {} ships {data:?}", ctx.sharding_item);
        self.pending
            .lock()
            .map_err(JobError::failed)?
            .retain(|id| !data.contains(id));
        Ok(())
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let pending = Arc::new(Mutex::new((0..100).collect::<Vec<u32>>()));
    let mut config = JobConfig::new("ship-orders", 3).with_cron(CronExpr::parse("* * * * * ?")?);
    config
        .props
        .insert("streaming.process".into(), "true".into());
    let scheduler = Scheduler::builder()
        .registry(Arc::new(MemServer::default().connect_default()))
        .job(
            config,
            Dataflow(ShipOrders {
                pending: Arc::clone(&pending),
            }),
        )
        .build()
        .await?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !pending.lock().map_err(|e| e.to_string())?.is_empty()
        && tokio::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    scheduler.shutdown().await?;
    println!(
        "left; {} orders still pending",
        pending.lock().map_err(|e| e.to_string())?.len()
    );
    Ok(())
}
