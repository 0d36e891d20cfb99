"""What a kafkalog output root keeps beside its partition dirs: the meta area's layout
(`meta_area`) and the run lock (`run_lock`) that every job writing the root, and every tool
reading it whole (`kafkalog place`), takes.
"""
