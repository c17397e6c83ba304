# Records a reading a second. While /var/lib/sensor/calibrating exists it holds the update
# lock, created exclusively as the supervisor creates it, around work an update must not cut.
trap 'exit 0' TERM INT
n=0
while :; do
  n=$((n+1))
  echo "reading $n from release $RELEASE" >> /var/lib/sensor/log
  echo "sensor: reading $n from release $RELEASE"
  if [ -f /var/lib/sensor/calibrating ] && (set -C; : > "$PLATFORM_APP_LOCK_PATH") 2>/dev/null; then
    echo "sensor: calibrating, holding the update lock"
    while [ -f /var/lib/sensor/calibrating ]; do sleep 1; done
    rm -f "$PLATFORM_APP_LOCK_PATH"
    echo "sensor: calibration done, lock released"
  fi
  sleep 1 & wait $!
done
