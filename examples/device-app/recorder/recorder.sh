# The recorder: counts its boots in the data volume, reads its own state from the supervisor,
# blinks the device's LED when asked, and holds the update lock while /data/critical exists
# (a critical section the supervisor must not interrupt with an update).
api="$PLATFORM_SUPERVISOR_ADDRESS"
key="$PLATFORM_SUPERVISOR_API_KEY"
lock="$PLATFORM_APP_LOCK_PATH"
holding=0

stop() {
  [ "$holding" = 1 ] && rm -f "$lock"
  echo "recorder $APP_VERSION: stopping"
  exit 0
}
trap stop TERM INT

echo "v$APP_VERSION" >> /data/boots
echo "recorder $APP_VERSION started, boot $(grep -c . /data/boots) of this volume"
echo "recorder $APP_VERSION: my state: $(wget -q -O- "$api/v2/state/status?apikey=$key")"

while :; do
  if [ -f /data/blink ]; then
    rm -f /data/blink
    wget -q -O- --post-data='' "$api/v1/blink?apikey=$key" >/dev/null && echo "recorder $APP_VERSION: blinking"
  fi
  if [ -f /data/critical ] && [ "$holding" = 0 ]; then
    # Taken exclusively, as the supervisor takes it: if the supervisor holds it, wait.
    if (set -C; : > "$lock") 2>/dev/null; then holding=1; echo "recorder $APP_VERSION: critical section, update lock taken"; fi
  elif [ ! -f /data/critical ] && [ "$holding" = 1 ]; then
    rm -f "$lock"; holding=0; echo "recorder $APP_VERSION: critical section over, update lock released"
  fi
  sleep 1 & wait $!
done
