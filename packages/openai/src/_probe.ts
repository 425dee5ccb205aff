const x: number = "a"
