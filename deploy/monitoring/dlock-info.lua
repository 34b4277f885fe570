-- INFO dlock for Prometheus through redis_exporter (Debian: prometheus-redis-exporter):
--   prometheus-redis-exporter -script /usr/local/share/dlock/dlock-info.lua ...
-- redis_exporter reads INFO ALL, which has no module sections; it runs this script on every
-- scrape and serves each pair it returns as redis_script_values{key="dlock_..."}.
-- Read-only: it runs on replicas too. The exporter's ACL user needs +eval and +info.
local out = {}
for name, value in string.gmatch(redis.call('INFO', 'dlock'), '(dlock_[%w_]+):(%d+)') do
  out[#out + 1] = name
  out[#out + 1] = value
end
return out
