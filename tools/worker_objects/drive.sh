#!/bin/bash
cd /tmp/workerobj; mkdir -p raw
LEAKS="row_group_lru_cache_in_workers backtest_pool_worker_keeps_feeds token_shard_blocks_kept_by_workers layout_pool_worker_keeps_page_state ehr_event_lists_read_by_workers cutout_index_objects_in_workers safe_dataset_memoizes_in_workers tokenizer_word_cache_in_workers frame_lru_cache_in_workers first_epoch_cache_filled_in_workers export_workers_reused_across_chunks python_rows_copied_by_workers manager_metric_queue_stalled_handler worker_image_cache molecule_graph_cache_in_workers manager_nested_records_kept"
FIXES="cow_dataset_workers collate_fn_graph dataloader_exception_workers dataloader_prefetch_shared_memory num_workers_gpu_memory persistent_workers_cache persistent_workers_cache_no_cache pin_memory_host_blowup spawn_without_main_guard"
for f in $FIXES; do timeout 240 nice -n 5 python probe.py run fix:$f raw/fix_$f.json >> drive.log 2>&1 || echo "FAIL fix:$f rc=$?" >> drive.log; done
timeout 240 nice -n 5 python probe.py run edge:queue_backlog_at_exit raw/edge_queue_backlog_at_exit.json >> drive.log 2>&1 || echo "FAIL edge rc=$?" >> drive.log
for f in $LEAKS; do timeout 240 nice -n 5 python probe.py run fresh:$f raw/fresh_$f.json >> drive.log 2>&1 || echo "FAIL fresh:$f rc=$?" >> drive.log; done
echo DONE >> drive.log
