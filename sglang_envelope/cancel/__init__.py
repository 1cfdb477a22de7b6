"""cancel"""
