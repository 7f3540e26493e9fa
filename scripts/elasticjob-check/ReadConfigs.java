import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.retry.RetryOneTime;
import org.apache.shardingsphere.elasticjob.infra.pojo.JobConfigurationPOJO;
import org.yaml.snakeyaml.LoaderOptions;
import org.yaml.snakeyaml.Yaml;
import java.nio.charset.StandardCharsets;

/** Reads every job's config node in namespace args[1] with 3.0.4's YamlEngine and POJO, and with 3.0.5's POJO; prints what each made of it. */
public final class ReadConfigs {
    public static void main(String[] args) throws Exception {
        CuratorFramework c = CuratorFrameworkFactory.newClient(args[0], new RetryOneTime(1000));
        c.start();
        c.blockUntilConnected();
        int bad = 0;
        for (String job : c.getChildren().forPath("/" + args[1])) {
            String yaml = new String(c.getData().forPath("/" + args[1] + "/" + job + "/config"), StandardCharsets.UTF_8);
            String r4, r5;
            try {
                JobConfigurationPOJO p = org.apache.shardingsphere.elasticjob.infra.yaml.YamlEngine.unmarshal(yaml, JobConfigurationPOJO.class);
                p.toJobConfiguration();
                r4 = "ok (executor " + p.getJobExecutorServiceHandlerType() + ")";
            } catch (Exception e) { r4 = "FAILS: " + e.getMessage().split("\n")[0]; bad++; }
            try {
                v305.JobConfigurationPOJO p = new Yaml(new LoaderOptions()).loadAs(yaml, v305.JobConfigurationPOJO.class);
                r5 = "ok (executor " + p.getJobExecutorThreadPoolSizeProviderType() + ")";
            } catch (Exception e) { r5 = "FAILS: " + e.getMessage().split("\n")[0]; bad++; }
            System.out.println(job + ": 3.0.4 " + r4 + "; 3.0.5 " + r5);
        }
        c.close();
        System.out.println(bad + " of the reads failed");
    }
}
