# ClickHouse server configuration shared by deploy/scripts/local/stack.sh
# (the local stack's one server) and deploy/scripts/cluster/cluster.sh (the
# test cluster's four): both write the same users file and the same server
# paths, differing only where they say so. Sourced, not run.

# ch_bin prints the ClickHouse server binary.
ch_bin() { command -v clickhouse-server 2>/dev/null || echo /usr/sbin/clickhouse-server; }

# ch_paths DIR prints the server's path settings under DIR (created here)
# and the settings every cfgd server shares: the users file in DIR, the
# default profile and database, and UTC as the server's zone.
ch_paths() {
	local dir="$1"
	mkdir -p "$dir/data" "$dir/tmp" "$dir/user_files" "$dir/format_schemas"
	cat <<XML
    <path>$dir/data/</path>
    <tmp_path>$dir/tmp/</tmp_path>
    <user_files_path>$dir/user_files/</user_files_path>
    <format_schema_path>$dir/format_schemas/</format_schema_path>
    <users_config>$dir/users.xml</users_config>
    <default_profile>default</default_profile>
    <default_database>default</default_database>
    <timezone>UTC</timezone>
XML
}

# ch_users DIR MAX_MEMORY LOAD_BALANCING writes DIR/users.xml: user
# default without a password from the loopback only, no quota, the
# profile's memory limit and load_balancing (a cluster reads a shard's
# replicas in_order: see docs/scaling.md).
ch_users() {
	cat >"$1/users.xml" <<XML
<?xml version="1.0"?>
<yandex>
    <profiles><default><max_memory_usage>$2</max_memory_usage><load_balancing>$3</load_balancing></default></profiles>
    <users><default><password></password><networks><ip>127.0.0.1</ip><ip>::1</ip></networks><profile>default</profile><quota>default</quota></default></users>
    <quotas><default><interval><duration>3600</duration><queries>0</queries><errors>0</errors><result_rows>0</result_rows><read_rows>0</read_rows><execution_time>0</execution_time></interval></default></quotas>
</yandex>
XML
}
