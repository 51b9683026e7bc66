
abc 