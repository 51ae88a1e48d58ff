#!/usr/bin/env bash
# Installs Temporal's time-skipping test server (io.temporal:temporal-test-server, the Java SDK's) into
# .tools/test-server from Maven Central, with a wrapper that takes the arguments the TypeScript SDK passes
# (`<port> [--enable-time-skipping] ...`). The SDK would download a native build from GitHub at run time, which
# fails offline; tests give it this wrapper as an existing executable. Needs java (17+) and mvn.
# TEMPORAL_TEST_SERVER_DIR installs it elsewhere (then point TEMPORAL_TEST_SERVER_PATH at its wrapper).
set -euo pipefail
version="${TEMPORAL_TEST_SERVER_VERSION:-1.31.0}"
root="$(cd "$(dirname "$0")/.." && pwd)"
dir="${TEMPORAL_TEST_SERVER_DIR:-$root/.tools/test-server}"
wrapper="$dir/temporal-test-server"
if [ -x "$wrapper" ] && [ -f "$dir/lib/temporal-test-server-$version.jar" ]; then
  echo "Temporal test server $version already in $wrapper"
  exit 0
fi
command -v java >/dev/null || { echo "install-test-server: java is missing (apt-get install openjdk-17-jre-headless)" >&2; exit 1; }
command -v mvn >/dev/null || { echo "install-test-server: mvn is missing (apt-get install maven)" >&2; exit 1; }
rm -rf "$dir"
mkdir -p "$dir"
cat > "$dir/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>durable-harness</groupId>
  <artifactId>test-server</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>io.temporal</groupId>
      <artifactId>temporal-test-server</artifactId>
      <version>$version</version>
    </dependency>
  </dependencies>
</project>
POM
mvn -q -B -f "$dir/pom.xml" dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$dir/lib"
cat > "$wrapper" <<'SH'
#!/usr/bin/env bash
# Temporal's time-skipping test server: `temporal-test-server <port> [--enable-time-skipping]`.
here="$(cd "$(dirname "$0")" && pwd)"
exec java -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Xshare:auto -cp "$here/lib/*" io.temporal.testserver.TestServer "$@"
SH
chmod +x "$wrapper"
echo "Temporal test server $version in $wrapper"
