import org.apache.shardingsphere.elasticjob.api.JobConfiguration;
import org.apache.shardingsphere.elasticjob.lite.api.bootstrap.impl.ScheduleJobBootstrap;
import org.apache.shardingsphere.elasticjob.lite.lifecycle.api.JobConfigurationAPI;
import org.apache.shardingsphere.elasticjob.lite.lifecycle.domain.JobBriefInfo;
import org.apache.shardingsphere.elasticjob.lite.lifecycle.internal.settings.JobConfigurationAPIImpl;
import org.apache.shardingsphere.elasticjob.lite.lifecycle.internal.statistics.JobStatisticsAPIImpl;
import org.apache.shardingsphere.elasticjob.lite.lifecycle.internal.statistics.ServerStatisticsAPIImpl;
import org.apache.shardingsphere.elasticjob.lite.lifecycle.internal.statistics.ShardingStatisticsAPIImpl;
import org.apache.shardingsphere.elasticjob.reg.zookeeper.ZookeeperConfiguration;
import org.apache.shardingsphere.elasticjob.reg.zookeeper.ZookeeperRegistryCenter;

/** Experiment driver: `run ZK NS JOB SCRIPT` schedules a SCRIPT job; `api ZK NS` reads every job with the lifecycle API. */
public final class ExpMain {
    public static void main(String[] args) throws Exception {
        ZookeeperConfiguration zc = new ZookeeperConfiguration(args[1], args[2]);
        zc.setSessionTimeoutMilliseconds(10000);
        zc.setConnectionTimeoutMilliseconds(10000);
        ZookeeperRegistryCenter reg = new ZookeeperRegistryCenter(zc);
        reg.init();
        if ("run".equals(args[0])) {
            JobConfiguration job = JobConfiguration.newBuilder(args[3], 4).cron("0/5 * * * * ?")
                    .setProperty("script.command.line", args[4]).failover(true).misfire(true)
                    .monitorExecution(true).overwrite(false).timeZone("GMT").build();
            new ScheduleJobBootstrap(reg, "SCRIPT", job).schedule();
            Thread.sleep(Long.MAX_VALUE);
        } else {
            JobConfigurationAPI configs = new JobConfigurationAPIImpl(reg);
            int n = 0;
            for (JobBriefInfo b : new JobStatisticsAPIImpl(reg).getAllJobsBriefInfo()) {
                System.out.println("job " + b.getJobName() + " status " + b.getStatus() + " instances " + b.getInstanceCount()
                        + " config " + configs.getJobConfiguration(b.getJobName()).getCron());
                System.out.println("  sharding " + new ShardingStatisticsAPIImpl(reg).getShardingInfo(b.getJobName()).size() + " items");
                n++;
            }
            System.out.println("servers " + new ServerStatisticsAPIImpl(reg).getAllServersBriefInfo().size() + ", jobs " + n);
            reg.close();
        }
    }
}
