# Version 1 writes its format; version 2 migrates it behind /data/migrating, for 3 s, and
# exits at once on SIGTERM (as many apps do), leaving a half-done migration to the next start.
trap 'exit 0' TERM
echo "store $APP_VERSION starting"
if [ "$APP_VERSION" = 2 ]; then
  if [ -f /data/migrating ]; then
    echo "store 2: found a migration that did not finish; refusing to start"
    exit 1
  fi
  if [ "$(cat /data/format 2>/dev/null)" != 2 ]; then
    touch /data/migrating
    sleep 3 & wait $!
    echo 2 > /data/format
    rm /data/migrating
    echo "store 2: migrated"
  fi
else
  [ -f /data/format ] || echo 1 > /data/format
fi
while :; do sleep 1 & wait $!; done
