enum StoragePlaceholder {}
