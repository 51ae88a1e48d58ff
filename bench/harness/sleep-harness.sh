#!/bin/sh
# A stdio-JSON harness for the scale bench (bench/scale.ts): each turn sleeps, then asks for one `echo` action;
# the last turn succeeds. A shell script, so the figures measure orchestration, not a harness's start-up.
#   sleep-harness.sh SECONDS TURNS
seconds=${1:-2}
turns=${2:-3}
IFS= read -r request
# Pull fields out of the request line without a subprocess (values are plain: digits, a UUID-like id).
turn=${request#*\"turn\":}
turn=${turn%%[!0-9]*}
case "$request" in
  *'"sessionId":"'*) id=${request#*\"sessionId\":\"}; id=${id%%\"*}; resumed=true ;;
  *) id="sleep-$$"; resumed=false ;;
esac
printf '{"type":"session","id":"%s","resumed":%s,"model":"sleep-1"}\n' "$id" "$resumed"
sleep "$seconds"
printf '{"type":"usage","input":100,"output":20}\n'
if [ "$turn" -ge "$turns" ]; then
  printf '{"type":"complete","text":"{\\"step\\":\\"success\\",\\"result\\":\\"slept %s turns\\"}"}\n' "$turn"
else
  printf '{"type":"complete","text":"{\\"step\\":\\"actions\\",\\"actions\\":[{\\"name\\":\\"echo\\",\\"params\\":{\\"text\\":\\"turn %s\\"}}]}"}\n' "$turn"
fi
