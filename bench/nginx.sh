#!/bin/sh
# nginx as the gateway benchmark's peer: a reverse proxy to one upstream with a keep-alive
# pool, run in the foreground from a temporary directory (never as a system service).
#
#   bench/nginx.sh LISTEN_PORT UPSTREAM_PORT DIR
#
# Installs the Debian package (nginx-light, else nginx) when nginx is missing and we are
# root; exits 3 when nginx cannot be had. NGINX_WORKERS sets worker_processes (default 1:
# the Traitgate core is one process, so the peer gets one worker too).
set -eu

listen_port=${1:?listen port}
upstream_port=${2:?upstream port}
dir=${3:?temporary directory}
workers=${NGINX_WORKERS:-1}

nginx_bin=$(command -v nginx || true)
[ -n "$nginx_bin" ] || [ ! -x /usr/sbin/nginx ] || nginx_bin=/usr/sbin/nginx
if [ -z "$nginx_bin" ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "nginx.sh: installing nginx-light" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y nginx-light >&2 ||
      { apt-get update >&2 && apt-get install -y nginx-light >&2; } ||
      apt-get install -y nginx >&2 || true
    # The package may start the system service: this benchmark wants its own instance only.
    if command -v service >/dev/null 2>&1; then service nginx stop >/dev/null 2>&1 || true; fi
  fi
  nginx_bin=$(command -v nginx || true)
  [ -n "$nginx_bin" ] || [ ! -x /usr/sbin/nginx ] || nginx_bin=/usr/sbin/nginx
fi
if [ -z "$nginx_bin" ]; then
  echo "nginx.sh: nginx is not installed and cannot be installed here" >&2
  exit 3
fi

mkdir -p "$dir/logs" "$dir/tmp"
chmod 0755 "$dir" "$dir/tmp"
cat >"$dir/nginx.conf" <<EOF
worker_processes $workers;
daemon off;
master_process on;
pid $dir/nginx.pid;
error_log $dir/logs/error.log warn;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path $dir/tmp/body;
  proxy_temp_path $dir/tmp/proxy;
  fastcgi_temp_path $dir/tmp/fastcgi;
  uwsgi_temp_path $dir/tmp/uwsgi;
  scgi_temp_path $dir/tmp/scgi;
  keepalive_requests 100000;
  keepalive_timeout 60s;
  client_body_buffer_size 64k;
  upstream plugin {
    server 127.0.0.1:$upstream_port;
    keepalive 64;
    keepalive_requests 100000;
  }
  server {
    listen 127.0.0.1:$listen_port;
    location / {
      proxy_pass http://plugin;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffer_size 16k;
      proxy_buffers 8 16k;
    }
  }
}
EOF
exec "$nginx_bin" -p "$dir" -c "$dir/nginx.conf"
