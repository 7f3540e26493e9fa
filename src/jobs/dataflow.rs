//! The Dataflow job: fetch, then process, once or as a stream.

use async_trait::async_trait;

use super::{CapturedOutput, Job, JobError, ShardingContext};

/// The prop that turns streaming on (`true`, any case; anything else is off).
pub const PROP_STREAMING: &str = "streaming.process";

/// A Dataflow job (ElasticJob's `DataflowJob`): per item, fetch data and process it.
///
/// One-off (the default): fetch once and, if anything came, process it once. Streaming (prop
/// `streaming.process: true`): fetch and process again and again until a fetch returns
/// nothing, a re-sharding is pending, or the run is cancelled. Pass it to the scheduler
/// wrapped in [`Dataflow`].
///
/// ```
/// use shardjob::jobs::{Dataflow, DataflowJob, JobError, ShardingContext};
///
/// struct Orders;
///
/// #[async_trait::async_trait]
/// impl DataflowJob for Orders {
///     type Data = u64;
///     async fn fetch_data(&self, ctx: &ShardingContext) -> Result<Vec<u64>, JobError> {
///         Ok(vec![]) // e.g. up to 100 unprocessed orders whose id % total == item
///     }
///     async fn process_data(&self, ctx: &ShardingContext, data: Vec<u64>) -> Result<(), JobError> {
///         Ok(())
///     }
/// }
/// let job = Dataflow(Orders);
/// ```
#[async_trait]
pub trait DataflowJob: Send + Sync + 'static {
    /// What one fetch returns a list of.
    type Data: Send + 'static;

    /// Fetches the next batch for the context's item; empty when there is nothing to do.
    async fn fetch_data(&self, ctx: &ShardingContext) -> Result<Vec<Self::Data>, JobError>;

    /// Processes one batch.
    async fn process_data(
        &self,
        ctx: &ShardingContext,
        data: Vec<Self::Data>,
    ) -> Result<(), JobError>;

    /// The type written to the job's root node; the Rust type name by default.
    fn job_type(&self) -> String {
        std::any::type_name::<Self>().to_owned()
    }
}

/// Makes a [`DataflowJob`] a [`Job`].
#[derive(Debug, Clone, Default)]
pub struct Dataflow<T>(pub T);

#[async_trait]
impl<T: DataflowJob> Job for Dataflow<T> {
    fn job_type(&self) -> String {
        self.0.job_type()
    }

    async fn execute_item(
        &self,
        ctx: &ShardingContext,
    ) -> Result<Option<CapturedOutput>, JobError> {
        let streaming = ctx
            .prop(PROP_STREAMING)
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
        loop {
            let data = self.0.fetch_data(ctx).await?;
            if data.is_empty() {
                return Ok(None);
            }
            self.0.process_data(ctx, data).await?;
            if !streaming || ctx.resharding.is_pending() {
                return Ok(None);
            }
            if ctx.cancel.is_cancelled() {
                return Err(JobError::Cancelled);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Mutex;

    use shardjob_core::machine::CancelReason;

    use super::*;
    use crate::jobs::CancelSignal;

    /// Hands out `batches` batches of 2, then nothing; records what was processed.
    struct Batches {
        left: Mutex<u32>,
        processed: Mutex<Vec<Vec<u32>>>,
    }

    impl Batches {
        fn new(batches: u32) -> Self {
            Self {
                left: Mutex::new(batches),
                processed: Mutex::new(Vec::new()),
            }
        }
    }

    #[async_trait]
    impl DataflowJob for Batches {
        type Data = u32;

        async fn fetch_data(&self, ctx: &ShardingContext) -> Result<Vec<u32>, JobError> {
            let mut left = self.left.lock().unwrap();
            if *left == 0 {
                return Ok(Vec::new());
            }
            *left -= 1;
            Ok(vec![ctx.sharding_item, *left])
        }

        async fn process_data(
            &self,
            _ctx: &ShardingContext,
            data: Vec<u32>,
        ) -> Result<(), JobError> {
            self.processed.lock().unwrap().push(data);
            Ok(())
        }
    }

    fn ctx(streaming: bool) -> ShardingContext {
        let props = BTreeMap::from([(PROP_STREAMING.to_owned(), streaming.to_string())]);
        ShardingContext::new("flow", 2, 1).with_props(props)
    }

    #[tokio::test]
    async fn one_off_processes_one_batch() {
        let job = Dataflow(Batches::new(3));
        job.execute_item(&ctx(false)).await.unwrap();
        assert_eq!(*job.0.processed.lock().unwrap(), vec![vec![1, 2]]);
    }

    #[tokio::test]
    async fn streaming_runs_until_fetch_is_empty() {
        let job = Dataflow(Batches::new(3));
        job.execute_item(&ctx(true)).await.unwrap();
        assert_eq!(job.0.processed.lock().unwrap().len(), 3);
    }

    #[tokio::test]
    async fn streaming_stops_on_resharding_and_cancellation() {
        let job = Dataflow(Batches::new(5));
        let c = ctx(true);
        c.resharding.set(true);
        job.execute_item(&c).await.unwrap();
        assert_eq!(job.0.processed.lock().unwrap().len(), 1);

        let job = Dataflow(Batches::new(5));
        let (cancel, signal) = CancelSignal::new();
        cancel.cancel(CancelReason::Shutdown);
        let err = job
            .execute_item(&ctx(true).with_cancel(signal))
            .await
            .unwrap_err();
        assert_eq!(err, JobError::Cancelled);
        assert_eq!(job.0.processed.lock().unwrap().len(), 1);
    }
}
