"""Task files: the bytes behind the URLs tasks name, from a content cache the host fills.

    data = await url_bytes("https://drive.google.com/uc?id=...")   # cached, else fetched
    cache = open_file_cache()                # $SCALECUA_FILES, default $SCALECUA_HOME/files
    cache.put(url, data)                     # seed a URL by hand (tests, air-gapped machines)

- `cache`: URL -> bytes, content-addressed in a blob store (folder or s3://), indexed by URL
  with sha256, size and when it was stored.
- `fetch`: the host's http(s) fetcher: redirects, retries with backoff, a size limit, no
  link-local hosts, Google Drive's download confirmation.
- `serve`: `url_bytes`, the cache first and a fetch on a miss when SCALECUA_FILES_FETCH allows
  (`on`, `loopback`, `off`); a file that cannot be had is a TaskError naming its URL.
- `urls`: which files a task names (`download` steps, `cloud_file` getters).
- `fill`: fill the cache for many tasks (`scalecua tasks files fetch`), and what is missing.
"""

from runtime.envs.tasks.files.cache import CachedFile, FileCache, open_file_cache
from runtime.envs.tasks.files.fetch import Fetched, Fetcher, FetchLimits, fetch_url
from runtime.envs.tasks.files.serve import url_bytes
from runtime.envs.tasks.files.urls import FileRef, is_web_url, task_files

__all__ = [
    "CachedFile",
    "FetchLimits",
    "Fetched",
    "Fetcher",
    "FileCache",
    "FileRef",
    "fetch_url",
    "is_web_url",
    "open_file_cache",
    "task_files",
    "url_bytes",
]
