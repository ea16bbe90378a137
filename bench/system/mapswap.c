/*
 * bench/system/mapswap: one ConfigMap swap, timed until the kernel sees it.
 *
 *   mapswap PID DIR VERSION [TIMEOUT_MS]
 *
 * Finds the `probe_configs` BPF map that process PID holds (through the map ids in
 * /proc/PID/fdinfo, so other agents on the node do not confuse it), snapshots every
 * entry's threshold, then swaps DIR/..data to VERSION the way the kubelet does
 * (symlink ..data_tmp, rename over ..data) and polls the map every ~0.1 ms until an
 * entry's threshold differs from the snapshot. Prints one line:
 *   reload_us=N key=K old=T0 new=T1 polls=P poll_us=U
 * where reload_us is CLOCK_MONOTONIC from just before rename(2) to the first poll
 * that saw the change, and poll_us the mean cost of one poll (a whole-map read).
 * Exit 0 on a change, 1 on timeout (default 5000 ms), 2 on usage/setup errors.
 * bench/system/reload builds it with `cc -O2 ... -lbpf` and calls it per swap.
 */
#define _GNU_SOURCE
#include <bpf/bpf.h>
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAP_NAME "probe_configs"
/* struct mcp_probe_config (bpf/mcp_abi.h) starts with its __u64 threshold. */

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The fd of the probe_configs map that PID holds, or -1. */
static int find_map(int pid, struct bpf_map_info *out)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/fdinfo", pid);
	DIR *d = opendir(path);
	if (!d)
		return -1;
	struct dirent *e;
	int found = -1;
	while (found < 0 && (e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		char p[320], line[256];
		snprintf(p, sizeof p, "%s/%s", path, e->d_name);
		FILE *f = fopen(p, "r");
		if (!f)
			continue;
		unsigned id = 0;
		while (fgets(line, sizeof line, f))
			if (sscanf(line, "map_id: %u", &id) == 1)
				break;
		fclose(f);
		if (!id)
			continue;
		int fd = bpf_map_get_fd_by_id(id);
		if (fd < 0)
			continue;
		struct bpf_map_info info = {0};
		__u32 len = sizeof info;
		if (bpf_obj_get_info_by_fd(fd, &info, &len) == 0 && strcmp(info.name, MAP_NAME) == 0) {
			*out = info;
			found = fd;
		} else {
			close(fd);
		}
	}
	closedir(d);
	return found;
}

/*
 * Every entry's threshold into t[0..n): one BPF_MAP_LOOKUP_BATCH syscall where the
 * kernel has it (array maps, 5.6+), else one lookup per key. vals holds n values.
 */
static int read_all(int fd, const struct bpf_map_info *info, uint64_t *t, char *vals, __u32 *keys)
{
	static int no_batch;
	__u32 n = info->max_entries;
	if (!no_batch) {
		__u32 out = 0, count = n;
		int err = bpf_map_lookup_batch(fd, NULL, &out, keys, vals, &count, NULL);
		if ((!err || errno == ENOENT) && count == n) {
			for (__u32 i = 0; i < n; i++)
				memcpy(&t[keys[i]], vals + (size_t)i * info->value_size, sizeof t[0]);
			return 0;
		}
		no_batch = 1;
	}
	for (__u32 k = 0; k < n; k++) {
		if (bpf_map_lookup_elem(fd, &k, vals))
			return -1;
		memcpy(&t[k], vals, sizeof t[k]);
	}
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 4) {
		fprintf(stderr, "usage: %s PID DIR VERSION [TIMEOUT_MS]\n", argv[0]);
		return 2;
	}
	int pid = atoi(argv[1]);
	const char *dir = argv[2], *version = argv[3];
	uint64_t timeout_ns = (argc > 4 ? strtoull(argv[4], NULL, 10) : 5000) * 1000000ull;

	struct bpf_map_info info;
	int fd = find_map(pid, &info);
	if (fd < 0) {
		fprintf(stderr, "mapswap: process %d holds no map named " MAP_NAME "\n", pid);
		return 2;
	}
	if (info.key_size != 4 || info.value_size < 8) {
		fprintf(stderr, "mapswap: unexpected layout (key %u, value %u)\n", info.key_size, info.value_size);
		return 2;
	}
	uint64_t *before = calloc(info.max_entries, sizeof *before);
	uint64_t *cur = calloc(info.max_entries, sizeof *cur);
	char *val = malloc((size_t)info.max_entries * info.value_size);
	__u32 *keys = calloc(info.max_entries, sizeof *keys);
	if (!before || !cur || !val || !keys || read_all(fd, &info, before, val, keys)) {
		fprintf(stderr, "mapswap: cannot read " MAP_NAME ": %s\n", strerror(errno));
		return 2;
	}

	char tmp[4096], data[4096];
	snprintf(tmp, sizeof tmp, "%s/..data_tmp", dir);
	snprintf(data, sizeof data, "%s/..data", dir);
	unlink(tmp);
	if (symlink(version, tmp)) {
		fprintf(stderr, "mapswap: symlink %s: %s\n", tmp, strerror(errno));
		return 2;
	}
	uint64_t t0 = now_ns();
	if (rename(tmp, data)) {
		fprintf(stderr, "mapswap: rename %s: %s\n", data, strerror(errno));
		return 2;
	}
	uint64_t polls = 0, poll_ns = 0;
	for (;;) {
		uint64_t a = now_ns();
		if (read_all(fd, &info, cur, val, keys)) {
			fprintf(stderr, "mapswap: lookup: %s\n", strerror(errno));
			return 2;
		}
		uint64_t b = now_ns();
		polls++;
		poll_ns += b - a;
		for (__u32 k = 0; k < info.max_entries; k++) {
			if (cur[k] != before[k]) {
				printf("reload_us=%.1f key=%u old=%llu new=%llu polls=%llu poll_us=%.1f\n", (b - t0) / 1e3,
				       k, (unsigned long long)before[k], (unsigned long long)cur[k],
				       (unsigned long long)polls, poll_ns / 1e3 / polls);
				return 0;
			}
		}
		if (b - t0 > timeout_ns) {
			printf("reload_us=timeout polls=%llu poll_us=%.1f\n", (unsigned long long)polls, poll_ns / 1e3 / polls);
			return 1;
		}
		struct timespec ts = {0, 100000};
		nanosleep(&ts, NULL);
	}
}
