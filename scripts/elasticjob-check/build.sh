#!/bin/bash
# Builds what the hand checks need, outside the repository, in $EJ (default
# ${TMPDIR:-/tmp}/shardjob-ej-check): ElasticJob 3.0.4's core, lifecycle API and SCRIPT executor
# from its sources with javac against Debian's jars; 3.0.5's JobConfigurationPOJO (its fields
# only, for the configuration check); the drivers of this directory; the job's script and files.
#
#   scripts/elasticjob-check/build.sh ELASTICJOB_GIT_DIR
#
# ELASTICJOB_GIT_DIR: a clone of apache/shardingsphere-elasticjob with its tags. Needs
# default-jdk-headless and libcurator-{framework,client,recipes}-java libquartz2-java
# libyaml-snake-java libgoogle-gson-java liblombok-java libcommons-exec-java (Debian 12).
set -euo pipefail
SRC=${1:?usage: build.sh ELASTICJOB_GIT_DIR}
EJ=${EJ:-${TMPDIR:-/tmp}/shardjob-ej-check}
HERE=$(cd "$(dirname "$0")" && pwd)
J=/usr/share/java
rm -rf "$EJ/src" "$EJ/classes" "$EJ/v305" "$EJ/harness"; mkdir -p "$EJ/src" "$EJ/classes" "$EJ/harness" "$EJ/v305/classes"
cd "$EJ/src"
git -C "$SRC" archive 3.0.4 elasticjob-api elasticjob-infra/elasticjob-infra-common \
  elasticjob-infra/elasticjob-registry-center \
  elasticjob-ecosystem/elasticjob-executor/elasticjob-executor-kernel \
  elasticjob-ecosystem/elasticjob-executor/elasticjob-executor-type/elasticjob-script-executor \
  elasticjob-ecosystem/elasticjob-executor/elasticjob-executor-type/elasticjob-simple-executor \
  elasticjob-ecosystem/elasticjob-tracing/elasticjob-tracing-api \
  elasticjob-ecosystem/elasticjob-error-handler/elasticjob-error-handler-spi \
  elasticjob-ecosystem/elasticjob-error-handler/elasticjob-error-handler-type/elasticjob-error-handler-general \
  elasticjob-lite/elasticjob-lite-core elasticjob-lite/elasticjob-lite-lifecycle | tar x
# SnakeYAML 2.x's tag inspector: Debian 12 has 1.33, which has none (and needs none).
sed -i '/setTagInspector/d' elasticjob-infra/elasticjob-infra-common/src/main/java/org/apache/shardingsphere/elasticjob/infra/yaml/YamlEngine.java
CP=$J/curator-framework.jar:$J/curator-client.jar:$J/curator-recipes.jar:$J/zookeeper.jar:$J/zookeeper-jute.jar:$J/quartz2.jar:$J/snakeyaml.jar:$J/gson.jar:$J/guava.jar:$J/commons-lang3.jar:$J/commons-exec.jar:$J/slf4j-api.jar:$J/slf4j-simple.jar:$J/netty-handler.jar:$J/netty-transport-native-epoll.jar:$J/netty-common.jar:$J/netty-transport.jar:$J/netty-buffer.jar:$J/netty-codec.jar:$J/netty-resolver.jar:$J/netty-transport-native-unix-common.jar
echo "$CP" > "$EJ/cp.txt"
find . -path "*src/main/java*" -name "*.java" > "$EJ/srcs.txt"
javac -nowarn -proc:full -processorpath $J/lombok.jar -cp "$CP:$J/lombok.jar" -d "$EJ/classes" @"$EJ/srcs.txt" 2>&1 | grep -v '^Note:' || true
# The SPI registrations, merged where several modules register the same service.
mkdir -p "$EJ/classes/META-INF/services"
find . -path "*src/main/resources/META-INF/services/*" -type f | while read -r f; do
  grep -v '^#' "$f" | grep -v '^\s*$' >> "$EJ/classes/META-INF/services/$(basename "$f")"
done
# 3.0.5's JobConfigurationPOJO: its fields, without the conversions that need ShardingSphere.
A=$EJ/v305/api; mkdir -p "$A" "$EJ/v305/pojo/v305"
git -C "$SRC" archive 3.0.5 api/src/main/java | tar x -C "$A"
git -C "$SRC" show 3.0.5:kernel/src/main/java/org/apache/shardingsphere/elasticjob/kernel/internal/config/JobConfigurationPOJO.java |
  python3 -c '
import sys
s = sys.stdin.read()
cut = s.index("    public JobConfiguration toJobConfiguration()")
doc = s.rfind("/**", 0, cut)
if doc > s.rfind(";", 0, cut):
    cut = s.rfind("\n", 0, doc) + 1
s = s[:cut] + "}\n"
for imp in ("org.apache.shardingsphere.elasticjob.spi.yaml.YamlConfigurationConverter",
            "org.apache.shardingsphere.infra.spi.type.typed.TypedSPILoader",
            "org.apache.shardingsphere.elasticjob.api.JobConfiguration"):
    s = s.replace("import " + imp + ";\n", "")
print(s.replace("package org.apache.shardingsphere.elasticjob.kernel.internal.config;", "package v305;"))
' > "$EJ/v305/pojo/v305/JobConfigurationPOJO.java"
P=$A/api/src/main/java/org/apache/shardingsphere/elasticjob
javac -nowarn -proc:full -processorpath $J/lombok.jar -cp "$CP:$J/lombok.jar" -d "$EJ/v305/classes" \
  "$P/api/JobExtraConfiguration.java" "$P/spi/yaml/YamlConfiguration.java" "$EJ/v305/pojo/v305/JobConfigurationPOJO.java" 2>&1 | grep -v '^Note:' || true
javac -nowarn -cp "$EJ/classes:$EJ/v305/classes:$CP" -d "$EJ/harness" "$HERE/ExpMain.java" "$HERE/ReadConfigs.java"
# The job: 4 items every 5 s; the script logs each run's start and end and sleeps 1.5 s.
cat > "$EJ/job.sh" <<JOB
#!/bin/sh
# \$1: the sharding context JSON (ElasticJob and shardjob append it the same way).
item=\$(printf '%s' "\$1" | sed -n 's/.*"shardingItem":\([0-9]*\).*/\1/p')
echo "\$(date +%s%3N) \${EXP_WHO:-?} \$item start \$\$ \${SHARDJOB_RUN_KIND:--} \${SHARDJOB_FIRE_TIME:--}" >> "$EJ/runs.log"
sleep 1.5
echo "\$(date +%s%3N) \${EXP_WHO:-?} \$item end \$\$" >> "$EJ/runs.log"
JOB
chmod +x "$EJ/job.sh"
sed "s|JOB_SH|$EJ/job.sh|" "$HERE/jobs.yaml" > "$EJ/jobs.yaml"
cp "$HERE/compat.yaml" "$EJ/compat.yaml"
echo "built in $EJ"
